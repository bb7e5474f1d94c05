"""An agent's search query over the length bound is refused with its own message (the bound's
code, RECALL_QUERY_TOO_LONG, not the generic "query must be non-blank text")."""

from __future__ import annotations

from pathlib import Path

from streams.facade import Recall
from streams.faces.mcp import Caller, SessionTools


def test_an_agent_query_over_the_bound_says_so(tmp_path: Path) -> None:
    with Recall.open(tmp_path / "data") as recall:
        recall.create_session("s", cwd="/w")
        tools = SessionTools(recall)
        for name, args in (("session_search", {}), ("session_event_search", {"session_id": "s"})):
            answer = tools.call(name, {**args, "query": "ab" * 600}, Caller("s", "/w"))
            assert answer.is_error and "longer than 1000 characters" in answer.text, name
        fine = tools.call("session_search", {"query": "ab" * 500}, Caller("s", "/w"))
        assert not fine.is_error
