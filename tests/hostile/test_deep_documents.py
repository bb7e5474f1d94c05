"""A whole-document format (Gemini CLI, OpenCode, Copilot CLI's JSON) whose one compact line
is nested past 128 levels is parked once, as INGEST_TOO_DEEP: the importer is not handed the
empty document that is left, which added a second, 0-byte INGEST_MALFORMED_JSON letter for the
same bytes ("2 rejected" against "parked 1")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from datadirs import ROOT

from streams.facade import Recall

AGENTS = ROOT / "tests" / "data" / "agents"
DOCUMENTS = ["gemini-cli-2025-10-pomodoro.json", "copilot-cli-2025-10-legacy.json",
             "opencode/ses_20c685993ffe8NJ44bWWcyosxi.json"]


def _deepened(document: dict[str, Any], depth: int) -> bytes:
    """The document as one compact line with a value nested `depth` levels under a new key."""
    compact = orjson.dumps(document)
    return compact[:-1] + b',"deep":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_a_deep_document_is_one_letter(tmp_path: Path, name: str) -> None:
    source = AGENTS / name
    with Recall.open(tmp_path / "clean") as recall:  # the sample itself is a session
        assert recall.ingest([source]).events_added > 0
    path = tmp_path / source.name
    path.write_bytes(_deepened(orjson.loads(source.read_bytes()), 10_000))
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest([path]).to_json()
        letters = recall.dead_letters()
    assert report["rejected"] == 1 and report["rejectedByCode"] == {"INGEST_TOO_DEEP": 1}
    assert report["accounting"]["parked"] == 1 and report["accounting"]["balanced"]
    [letter] = letters
    assert letter["code"] == "INGEST_TOO_DEEP" and letter["length"] == path.stat().st_size
