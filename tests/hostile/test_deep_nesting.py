"""Deep nesting: a line nested over 128 levels is rejected with INGEST_TOO_DEEP (kept whole) and
the rest of the run goes on; a cursor decoding to deep JSON is INVALID_CURSOR, not a crash."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from datadirs import dead_letters, parked_bytes
from factories import header, user

from projections.errors import SessionQueryError


def _deep(depth: int) -> bytes:
    return (b'{"type":"vendor/x","seq":1,"time":5,"ignorable":true,"data":' + b"[" * depth
            + b"]" * depth + b"}")


@pytest.mark.parametrize("depth", [130, 300, 2000])
def test_a_deep_line_is_parked_and_the_run_goes_on(recall: Any, write_log: Callable[..., Path],
                                                   depth: int) -> None:
    deep = write_log("a-deep.jsonl", header("deep", cwd="/w"), [user(0, "first")],
                     raw_lines=[_deep(depth)])
    good = write_log("b-good.jsonl", header("good", cwd="/w"), [user(0, "cabinet")])
    report = recall.ingest([deep, good]).to_json()
    assert report["accounting"]["balanced"] and report["sessions"] == 2
    assert report["rejectedByCode"] == {"INGEST_TOO_DEEP": 1}
    [letter] = dead_letters(recall.settings.data_dir)
    assert letter["code"] == "INGEST_TOO_DEEP" and parked_bytes(letter) == _deep(depth)
    assert recall.search_sessions("cabinet")["items"][0]["header"]["id"] == "good"
    assert recall.read_event("deep", 0)["event"]["event"]["seq"] == 0


def test_128_levels_are_accepted(recall: Any, write_log: Callable[..., Path]) -> None:
    depth = 128 - 1  # the event object itself is the first level
    path = write_log("ok.jsonl", header("ok", cwd="/w"), [user(0, "first")],
                     raw_lines=[_deep(depth)])
    report = recall.ingest([path]).to_json()
    assert report["rejected"] == 0 and report["eventsAdded"] == 2


def test_a_deeply_nested_cursor_is_invalid_not_a_crash(recall: Any,
                                                       write_log: Callable[..., Path]) -> None:
    recall.ingest([write_log("s.jsonl", header("s", cwd="/w"), [user(0, "needle")])])
    for payload in (b"[" * 300 + b"]" * 300, b'{"mac":"x","a":' + b"[" * 300 + b"]" * 300 + b"}"):
        cursor = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        with pytest.raises(SessionQueryError) as caught:
            recall.search_sessions("needle", cursor=cursor)
        assert caught.value.code == "SESSION_QUERY_INVALID_CURSOR"
