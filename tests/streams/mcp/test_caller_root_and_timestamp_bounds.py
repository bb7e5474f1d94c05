"""MCP caller and timestamps: without --cwd, a client's declared root becomes the workspace only
when it agrees with the caller's own header (a client cannot widen its own workspace); a
timestamp with an absurdly long fraction is a validation error, not TOOL_FAILED."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import anyio
import pytest

from streams.facade import Recall

# The MCP suite's corpus, loaded by path: putting its directory on sys.path would change which
# `conftest` other test modules import by name.
_spec = importlib.util.spec_from_file_location(
    "mcp_corpus_by_path", Path(__file__).resolve().parent / "mcp_corpus.py")
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)
ALPHA, BETA, write_corpus = corpus.ALPHA, corpus.BETA, corpus.write_corpus


@pytest.fixture(scope="module")
def recall(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("mcp")
    with Recall.open(root / "data", shards=2) as opened:
        opened.ingest(write_corpus(root / "sources"))
        yield opened


def _caller_cwd(recall: Any, monkeypatch: pytest.MonkeyPatch, session: str,
                root: str | None) -> str | None:
    from streams.faces.mcp import server

    async def declared(ctx: Any) -> str | None:
        return root

    monkeypatch.setattr(server, "client_root", declared)
    tool_server = server.ToolServer(recall, server.ServerOptions(session_id=session, cwd=None))
    caller = anyio.run(tool_server.caller, None)
    return caller.cwd  # type: ignore[no-any-return]


def test_a_root_other_than_the_callers_header_cwd_is_ignored(
        recall: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _caller_cwd(recall, monkeypatch, "alpha-root", BETA) is None
    assert _caller_cwd(recall, monkeypatch, "alpha-root", "/") is None
    assert _caller_cwd(recall, monkeypatch, "alpha-root", ALPHA) == ALPHA
    # a session not stored yet has no header to contradict its root
    assert _caller_cwd(recall, monkeypatch, "brand-new-session", BETA) == BETA


def test_absurd_timestamp_fractions_are_validation_errors(recall: Any) -> None:
    from streams.faces.mcp import Caller, SessionTools

    tools = SessionTools(recall)
    for fraction in ("1" * 10_000, "5" * 65):
        answer = tools.call("session_search", {
            "query": "widget", "event_time_from": f"2025-11-24T16:00:00.{fraction}Z"},
            Caller("alpha-root", ALPHA))
        assert answer.is_error and "operation failed" not in answer.text
        assert "event_time_from" in answer.text and "fraction" in answer.text
    ok = tools.call("session_search", {"query": "widget",
                                       "event_time_from": f"2025-11-24T16:00:00.{'5' * 64}Z"},
                    Caller("alpha-root", ALPHA))
    assert not ok.is_error
