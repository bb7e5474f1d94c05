"""Every rejected input is kept whole (or as a bounded record over the cap) under the reason that
fits it: a truncated .zst, a headerless file, garbage; a truncated last line is pending (not
silently "unchanged") and taken once complete; `ingest --json` accounts for every line read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import zstandard
from datadirs import dead_letters, parked_bytes
from factories import header, user


def _codes(data: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for letter in dead_letters(data):
        out.setdefault(letter["code"], []).append(letter)
    return out


def test_rejected_files_are_parked_with_all_their_bytes(recall: Any, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    log = b"\n".join(orjson.dumps(x) for x in [header("z", cwd="/w"),
                                               *[user(i, "text " * 40) for i in range(60)]])
    packed = zstandard.ZstdCompressor().compress(log + b"\n")
    (inputs / "cut.jsonl.zst").write_bytes(packed[:len(packed) // 2])
    headerless = b"\n".join(orjson.dumps(user(i, "x" * 300)) for i in range(80)) + b"\n"
    (inputs / "headerless.jsonl").write_bytes(headerless)
    garbage = os.urandom(65536)
    (inputs / "garbage.jsonl").write_bytes(garbage)
    report = recall.ingest([inputs]).to_json()
    assert report["accounting"]["balanced"]
    codes = _codes(recall.settings.data_dir)
    [cut] = codes["INGEST_CORRUPT_COMPRESSION"]
    assert parked_bytes(cut) == packed[:len(packed) // 2] and "truncated" in cut["reason"]
    whole = {Path(x["source"]).name: parked_bytes(x) for x in codes["INGEST_UNSUPPORTED_FORMAT"]}
    assert whole == {"headerless.jsonl": headerless, "garbage.jsonl": garbage}
    assert len(headerless) > 27_000


def test_a_truncated_last_line_is_pending_and_taken_once_complete(
        recall: Any, write_log: Callable[..., Path]) -> None:
    head, first, second = header("p", cwd="/w"), user(0, "one"), user(1, "two")
    path = write_log("p.jsonl", head, [first])
    complete = path.read_bytes()
    path.write_bytes(complete + orjson.dumps(second)[:25])
    report = recall.ingest([path]).to_json()
    assert report["pending"] == 1 and report["pendingSources"] == [str(path.resolve())]
    assert report["accounting"] == {"linesRead": 3, "ingested": 2, "duplicatesSkipped": 0,
                                    "parked": 0, "pending": 1, "balanced": True}
    again = recall.ingest([path]).to_json()
    assert again["unchanged"] == 1 and again["pendingSources"] == [str(path.resolve())]
    path.write_bytes(complete + orjson.dumps(second) + b"\n")
    done = recall.ingest([path]).to_json()
    assert done["eventsAdded"] == 1 and done["pending"] == 0 and done["rejected"] == 0
    assert recall.read_event("p", 1)["event"]["event"] == second


def test_a_last_line_without_newline_that_is_complete_json_is_taken(
        recall: Any, write_log: Callable[..., Path]) -> None:
    path = write_log("q.jsonl", header("q", cwd="/w"), [user(0, "one")])
    path.write_bytes(path.read_bytes() + orjson.dumps(user(1, "two")))
    report = recall.ingest([path]).to_json()
    assert report["eventsAdded"] == 2 and report["pending"] == 0
    path.write_bytes(path.read_bytes() + b"\n" + orjson.dumps(user(2, "three")) + b"\n")
    grown = recall.ingest([path]).to_json()
    assert grown["eventsAdded"] == 1 and grown["lines"] == 1 and grown["rejected"] == 0


def test_whitespace_after_the_last_newline_is_no_line_and_not_pending(
        recall: Any, write_log: Callable[..., Path]) -> None:
    # found by the mutation fuzzer: a file ending "\n\t" counted the tab as a pending line
    # (linesRead 1 more than the file's non-blank lines) and listed the file as pending
    path = write_log("w.jsonl", header("w", cwd="/w"), [user(0, "one")])
    complete = path.read_bytes()
    path.write_bytes(complete + b"\t ")
    report = recall.ingest([path]).to_json()
    assert report["pending"] == 0 and report["pendingSources"] == []
    assert report["accounting"] == {"linesRead": 2, "ingested": 2, "duplicatesSkipped": 0,
                                    "parked": 0, "pending": 0, "balanced": True}
    # a writer completing a line there: the whitespace is part of it (JSON allows it)
    path.write_bytes(complete + b"\t " + orjson.dumps(user(1, "two")) + b"\n")
    grown = recall.ingest([path]).to_json()
    assert grown["eventsAdded"] == 1 and grown["rejected"] == 0
    assert recall.read_event("w", 1)["event"]["event"] == user(1, "two")
