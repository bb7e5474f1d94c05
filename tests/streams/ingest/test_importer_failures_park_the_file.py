"""An importer exception never escapes the ingest edge: on a type-confused record (`"summary":
[1]`, a Codex `payload.type` list) that file is parked whole (INGEST_IMPORTER_FAILED, its bytes
as on disk, the traceback in the data dir's log), the other files are ingested, and the
accounting balances. Whether an importer copes with a given record is the importers' business;
these tests only require containment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from datadirs import REALDATA, dead_letters, parked_bytes

from streams.facade import Recall


def _mutate(src: Path, dst: Path, change: Any) -> Path:
    lines = [orjson.loads(line) for line in src.read_bytes().splitlines()]
    for value in lines:
        if change(value):
            break
    dst.write_bytes(b"\n".join(orjson.dumps(v) for v in lines) + b"\n")
    return dst


def _summary_list(value: dict[str, Any]) -> bool:
    if value.get("type") == "summary":
        value["summary"] = [1]
        return True
    return False


def _payload_type_list(value: dict[str, Any]) -> bool:
    payload = value.get("payload")
    if value.get("type") == "response_item" and isinstance(payload, dict):
        payload["type"] = ["x"]
        return True
    return False


@pytest.mark.parametrize(("source", "name", "change"), [
    ("claude-code-2.1.5-compaction.jsonl", "cc.jsonl", _summary_list),
    ("codex-0.125-parent.jsonl", "rollout-2025-x.jsonl", _payload_type_list),
])
def test_a_type_confused_record_never_ends_the_run(tmp_path: Path, source: str, name: str,
                                                   change: Any) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    bad = _mutate(REALDATA / source, inputs / name, change)
    good = inputs / "z-good.jsonl"
    good.write_bytes((REALDATA / "claude-code-1.0.98-sidechains.jsonl").read_bytes())
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest([inputs]).to_json()
        assert report["accounting"]["balanced"]
        assert any(s["header"]["id"] for s in recall.list_sessions())
    for letter in dead_letters(tmp_path / "data"):
        if letter["code"] == "INGEST_IMPORTER_FAILED":
            assert parked_bytes(letter) == bad.read_bytes()
            assert (tmp_path / "data" / "log" / "recall.log").read_text().count("Traceback")


def test_an_importer_that_raises_parks_its_file_whole(tmp_path: Path) -> None:
    def broken(data: bytes, source: str) -> list[Any]:
        raise TypeError("unhashable type: 'list'")

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_bytes((REALDATA / "codex-0.125-parent.jsonl").read_bytes())
    (inputs / "b.jsonl").write_bytes(b'{"type":"session","version":0,"id":"n","createdAt":1}\n'
                                     b'{"type":"vendor/x","seq":0,"time":2,"ignorable":true,'
                                     b'"data":1}\n')
    data = tmp_path / "data"
    with _open(data, broken) as recall:
        report = recall.ingest([inputs]).to_json()
        assert [s["header"]["id"] for s in recall.list_sessions()] == ["n"]
    assert report["rejectedByCode"] == {"INGEST_IMPORTER_FAILED": 1}
    assert report["accounting"] == {"linesRead": 3, "ingested": 2, "duplicatesSkipped": 0,
                                    "parked": 1, "pending": 0, "balanced": True}
    [letter] = dead_letters(data)
    assert parked_bytes(letter) == (inputs / "a.jsonl").read_bytes()
    # retried (not re-parked) on the next run
    with _open(data, broken) as recall:
        again = recall.ingest([inputs]).to_json()
    assert again["deadLettersAdded"] == 0 and len(dead_letters(data)) == 1


def _open(data: Path, importer: Any) -> Recall:
    from streams.core.settings import load_settings
    from streams.facade import EmbeddedBackend

    settings = load_settings(data_dir=data)
    detect = lambda path, head: "codex" if path.name == "a.jsonl" else None  # noqa: E731
    return Recall(EmbeddedBackend(settings, importers={"codex": importer}, detect=detect),
                  settings)
