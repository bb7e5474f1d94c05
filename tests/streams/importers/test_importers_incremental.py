"""Incremental import: a grown file re-imports to the old events plus new ones, and the prefix
identity tells grown from rewritten."""

from __future__ import annotations

from typing import Any

import pytest
from importer_support import CC_215, CC_1098, CC_2114, CODEX, Importer, load

from streams.ingest.importers import (
    IMPORTERS,
    classify_change,
    import_claude_code,
    import_codex,
    prefix_identity,
)

CASES = [(CC_1098, import_claude_code), (CC_2114, import_claude_code),
         (CC_215, import_claude_code), (CODEX, import_codex)]


Events = list[dict[str, Any]]


def _by_id(importer: Importer, data: bytes, name: str) -> dict[str, tuple[dict[str, Any], Events]]:
    return {s.header["id"]: (s.header, s.events) for s in importer(data, name)}


@pytest.mark.parametrize(("name", "importer"), CASES)
def test_importing_a_prefix_yields_a_prefix_of_the_events(name: str, importer: Importer) -> None:
    data = load(name)
    full = _by_id(importer, data, name)
    cuts = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    # Every line boundary, plus a cut inside each of a few lines (a writer mid-append).
    cuts += [cut - 7 for cut in cuts[::9]]
    compared = 0
    for cut in cuts:
        for sid, (header, events) in _by_id(importer, data[:cut], name).items():
            if sid not in full:  # a placeholder for lines no session has claimed yet
                assert events == []
                continue
            assert header == full[sid][0], (cut, sid)
            assert events == full[sid][1][:len(events)], (cut, sid)
            compared += len(events)
    assert len(cuts) > 50 and compared > 20 * sum(len(e) for _, e in full.values())


@pytest.mark.parametrize(("name", "importer"), CASES)
def test_import_returns_header_events_rejections_triples(name: str, importer: Importer) -> None:
    for header, events, rejections in importer(load(name), name):
        assert header["type"] == "session" and events and rejections == []


def test_registry_names_match_detect_format() -> None:
    assert set(IMPORTERS) == {"claude-code", "codex", "gemini-cli", "gemini-cli-jsonl",
                              "copilot-cli", "copilot-cli-legacy", "opencode", "aider", "pi",
                              "continue", "roo-code", "roo-code-api", "kimi-cli", "openhands",
                              "crush"}
    assert IMPORTERS["claude-code"].load is import_claude_code
    assert IMPORTERS["codex"].load is import_codex


def test_prefix_identity_tells_grown_from_rewritten() -> None:
    data = load(CC_2114)
    half = data[:data.index(b"\n", len(data) // 2) + 1]
    seen = prefix_identity(half)
    assert seen.length == len(half)
    assert classify_change(seen, half) == "unchanged"
    assert classify_change(seen, data) == "grown"
    # A partial last line is not part of the identity: it may still be being written.
    assert prefix_identity(half + b'{"type":"us') == seen
    assert classify_change(seen, half + b'{"type":"us') == "unchanged"
    edited = half.replace(b"Conversation", b"Conversations", 1) if b"Conversation" in half \
        else b"x" + half[1:]
    assert classify_change(seen, edited + data[len(half):]) == "rewritten"
    assert classify_change(seen, half[:100]) == "rewritten"
