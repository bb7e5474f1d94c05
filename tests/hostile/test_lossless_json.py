"""JSON is read losslessly: numbers that would change (`18446744073709551616`, `1e400`) and keys
repeated in one object are INGEST_LOSSY_JSON (kept whole); an exact duplicate line is skipped and
a conflicting one is INGEST_DUPLICATE_CONFLICT; a non-string type is parked, not raised."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from datadirs import dead_letters, parked_bytes
from factories import header, user

from projections.errors import InputRejected


def _with_data(value: bytes) -> bytes:
    return (b'{"type":"vendor/x","seq":1,"time":5,"ignorable":true,"data":{"v":' + value
            + b"}}")


@pytest.mark.parametrize("value", [b"18446744073709551616", b"9007199254740993",
                                   b"-9007199254740993", b"1e400", b"-1e999"])
def test_numbers_that_would_change_are_rejected(recall: Any, write_log: Callable[..., Path],
                                                value: bytes) -> None:
    line = _with_data(value)
    path = write_log("n.jsonl", header("n", cwd="/w"), [user(0, "a")], raw_lines=[line])
    report = recall.ingest([path]).to_json()
    assert report["rejectedByCode"] == {"INGEST_LOSSY_JSON": 1}
    [letter] = dead_letters(recall.settings.data_dir)
    assert parked_bytes(letter) == line


def test_safe_extremes_pass() -> None:
    from projections.codec import loads_lossless as loads

    assert loads(_with_data(b"9007199254740991"))["data"]["v"] == 2**53 - 1
    assert loads(_with_data(b"1.5e300"))["data"]["v"] == 1.5e300


def test_a_repeated_key_is_rejected_not_last_wins(recall: Any, tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    head = b'{"type":"session","version":0,"id":"first","id":"second","createdAt":1}'
    path.write_bytes(head + b"\n" + orjson.dumps(user(0, "a")) + b"\n")
    report = recall.ingest([path]).to_json()
    assert report["rejectedByCode"] == {"INGEST_LOSSY_JSON": 1, "INGEST_AFTER_REJECTED": 1}
    assert recall.list_sessions() == []
    from projections.codec import loads_lossless as loads

    with pytest.raises(InputRejected) as caught:
        loads(b'{"a":{"b":1,"b":1}}')
    assert caught.value.code == "INGEST_LOSSY_JSON"


def test_duplicate_lines_inside_one_file(recall: Any, write_log: Callable[..., Path]) -> None:
    a0, a1, other1 = user(0, "zero"), user(1, "one"), user(1, "not one")
    path = write_log("d.jsonl", header("d", cwd="/w"), [a0, a0, a1, other1])
    report = recall.ingest([path]).to_json()
    assert report["duplicateLines"] == 1 and report["eventsAdded"] == 2
    assert report["rejectedByCode"] == {"INGEST_DUPLICATE_CONFLICT": 1}
    [letter] = dead_letters(recall.settings.data_dir)
    assert letter["line"] == 5 and parked_bytes(letter) == orjson.dumps(other1)


@pytest.mark.parametrize("line", [b'{"type":["list"]}', b'{"type":{"a":1},"seq":1,"time":1,"data":{}}'])
def test_a_type_that_is_not_a_string_is_parked_not_raised(
        recall: Any, write_log: Callable[..., Path], line: bytes) -> None:
    # found by the mutation fuzzer: `["list"] in CHUNK_ROW_TYPES` raised TypeError out of ingest
    path = write_log("t.jsonl", header("t", cwd="/w"), [user(0, "a")], raw_lines=[line])
    report = recall.ingest([path]).to_json()
    assert report["rejectedByCode"] == {"INGEST_SCHEMA_VIOLATION": 1}
    [letter] = dead_letters(recall.settings.data_dir)
    assert parked_bytes(letter) == line
