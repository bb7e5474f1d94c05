"""Format detection: per file, from the first bytes (which may cut a long first line short)."""

from __future__ import annotations

import pytest
import zstandard
from importer_support import CC_215, CC_1098, CC_2114, CODEX, load

from streams.ingest.importers import detect_format


@pytest.mark.parametrize(("name", "expected"), [
    (CC_1098, "claude-code"), (CC_2114, "claude-code"), (CC_215, "claude-code"),
    (CODEX, "codex"),
])
def test_real_excerpts_are_recognised_from_their_first_bytes(name: str, expected: str) -> None:
    head = load(name)[:65536]
    assert detect_format(f"/tmp/{name}", head) == expected


def test_a_first_line_longer_than_the_bytes_given_is_still_recognised() -> None:
    # Codex session_meta lines hold the whole system prompt: 4 KB is mid-line.
    head = load(CODEX)[:300]
    assert b"\n" not in head
    assert detect_format("/x/anything.jsonl", head) == "codex"
    assert detect_format("/x/a.jsonl", load(CC_2114)[:200]) == "claude-code"


def test_native_header_and_zstd() -> None:
    native = b'{"type":"session","version":0,"id":"s1","createdAt":1}\n'
    assert detect_format("s1.jsonl", native) == "dsh"
    packed = zstandard.ZstdCompressor().compress(load(CODEX)[:20000])
    assert detect_format("rollout.jsonl.zst", packed) == "codex"
    assert detect_format("s1.jsonl.zstd", zstandard.ZstdCompressor().compress(native)) == "dsh"


def test_unknown_content_falls_back_to_the_path_or_none() -> None:
    assert detect_format("/h/.codex/sessions/2026/04/29/rollout-2026-x.jsonl", b"") == "codex"
    assert detect_format("/h/.claude/projects/-w/abc.jsonl", b"not json") == "claude-code"
    assert detect_format("/h/notes.jsonl", b'{"hello":"world"}\n') is None
    assert detect_format("/h/empty.jsonl", b"") is None


def test_json_lines_holding_a_document_formats_keys_are_not_that_document() -> None:
    # found by the mutation fuzzer: a Claude Code log (every record has "sessionId") with a
    # record or junk line holding a "timeline" key was claimed by the Copilot legacy importer,
    # and the whole file parked as one malformed document
    log = load(CC_1098)
    lines = log.split(b"\n")
    mixed = b"\n".join([lines[0], b'"timeline":', *lines[1:]])
    assert detect_format("/x/a.jsonl", mixed[:65536]) == "claude-code"
    record = b'{"sessionId":"s","timeline":[],"chatMessages":[],"parentUuid":null,"type":"user"}'
    assert detect_format("/x/b.jsonl", b"\n".join([record, record])) == "claude-code"
    # a Gemini CLI record stream with the document's keys
    gem = b'{"sessionId":"s","projectHash":"p","messages":[]}'
    assert detect_format("/x/c.jsonl", b"\n".join([gem, gem])) != "gemini-cli"
    # the documents themselves, compact or pretty-printed, are still recognised
    doc = b'{"sessionId":"s","startTime":"2025-01-01T00:00:00Z","timeline":[]}'
    assert detect_format("/x/d.json", doc) == "copilot-cli-legacy"
    assert detect_format("/x/e.json", doc.replace(b",", b",\n  ")) == "copilot-cli-legacy"
