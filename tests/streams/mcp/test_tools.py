"""Agent tools in-process: paging and caps, the error boundary, clamps, and the dry-run reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_corpus import ALPHA, simple

from projections.errors import SessionQueryError
from streams.facade import Recall
from streams.faces.mcp import Caller, SessionTools

ME = Caller("alpha-root", ALPHA)


def run(tools: SessionTools, name: str, caller: Caller = ME, **arguments: Any) -> str:
    return tools.call(name, arguments, caller).text


def test_cap_counts_only_accepted_items(recall: Recall) -> None:
    # Four sessions of the workspace match, plus the caller itself (never counted).
    assert "Result cap reached" not in run(SessionTools(recall, max_search_results=4),
                                           "session_search", query="widget")
    capped = run(SessionTools(recall, max_search_results=2), "session_search", query="widget")
    assert capped.startswith("Session search results (2):")
    assert "\n\n3. Session" not in capped
    assert capped.endswith("\n\nResult cap reached. Narrow the query or add filters to find "
                           "additional matches.")


def test_cursors_are_followed_past_the_provider_page(tmp_path: Path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    for n in range(45):  # more than two provider pages of 20
        lines = simple(f"many-{n:02d}", "/w/many", 1_700_000_000_000 + n, ["needle here", "ok"])
        (sources / f"many-{n:02d}.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
    with Recall.open(tmp_path / "data", shards=2) as recall:
        recall.ingest([sources])
        tools = SessionTools(recall, max_search_results=100)
        text = run(tools, "session_search", Caller("many-00", "/w/many"), query="needle")
        assert text.startswith("Session search results (44):")
        assert "many-00" not in text and "Result cap reached" not in text
        capped = run(SessionTools(recall, max_search_results=30), "session_search",
                     Caller("many-00", "/w/many"), query="needle")
        assert capped.startswith("Session search results (30):")
        assert capped.endswith("Result cap reached. Narrow the query or add filters to find "
                               "additional matches.")


class FakeRecall:
    """Just enough of `Recall` to script provider behaviour the real index never shows."""

    def __init__(self, pages: list[Any]) -> None:
        self.pages = pages
        self.searches = 0

    def search_sessions(self, request: dict[str, Any]) -> dict[str, Any]:
        self.searches += 1
        page = self.pages[min(self.searches - 1, len(self.pages) - 1)]
        if isinstance(page, BaseException):
            raise page
        return dict(page)

    def filter_sessions(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return []


def _item(session_id: str) -> dict[str, Any]:
    return {"header": {"id": session_id, "createdAt": 0, "cwd": ALPHA}, "live": False,
            "persisted": True, "bestMatch": {"sessionId": session_id, "seq": 1, "time": 0,
                                             "type": "user/message", "surface": "current",
                                             "snippet": "x"}}


@pytest.mark.parametrize(("failure", "message"), [
    (SessionQueryError("gen 3 != 4", code="SESSION_QUERY_STALE_CURSOR"),
     "Error: session history changed while paging; retry the complete search call"),
    (SessionQueryError("openAt never", code="SESSION_QUERY_SEARCH_DISABLED"),
     "Error: session search is disabled in this deployment"),
    (SessionQueryError("/srv/recall/index/shard-1.sqlite: bad", code="SESSION_QUERY_INVALID_CONFIG"),
     "Error: session query operation failed"),
    (SessionQueryError("a vs b", code="SESSION_QUERY_SOURCE_CONFLICT"),
     "Error: session query operation failed"),
    (RuntimeError("Traceback ... /home/secret/path.py line 3"),
     "Error: session query operation failed"),
])
def test_error_boundary_maps_to_fixed_messages(failure: BaseException, message: str) -> None:
    fake = FakeRecall([{"items": [_item("a")], "nextCursor": "c1"}, failure])
    answer = SessionTools(fake, max_search_results=5).call(  # type: ignore[arg-type]
        "session_search", {"query": "x"}, ME)
    assert (answer.text, answer.is_error) == (message, True)
    assert fake.searches == 2  # the stale page came from following the cursor: no restart


def test_unprintable_errors_are_still_contained() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    answer = SessionTools(FakeRecall([Hostile()]), max_search_results=5).call(  # type: ignore[arg-type]
        "session_search", {"query": "x"}, ME)
    assert answer.text == "Error: session query operation failed"


def test_repeated_cursor_is_invalid_cursor() -> None:
    fake = FakeRecall([{"items": [_item("a")], "nextCursor": "same"},
                       {"items": [_item("b")], "nextCursor": "same"}])
    answer = SessionTools(fake, max_search_results=10).call(  # type: ignore[arg-type]
        "session_search", {"query": "x"}, ME)
    assert answer.text == "Error: session-search provider repeated a continuation cursor"


def test_hits_failing_the_workspace_check_are_dropped_before_the_cap() -> None:
    foreign = _item("other")
    foreign["header"]["cwd"] = "/work/beta"
    fake = FakeRecall([{"items": [_item("a"), foreign, _item("alpha-root")]}])
    text = SessionTools(fake, max_search_results=1).call(  # type: ignore[arg-type]
        "session_search", {"query": "x"}, ME).text
    # Titles cannot be read from this fake: the per-id failure is shown, not fatal.
    assert text.startswith("Session search results (1):\n\n1. Session a — untitled (title "
                           "unavailable: SESSION_QUERY_SESSION_NOT_FOUND)")
    assert "other" not in text and "Result cap reached" not in text


def test_caller_identity_is_required() -> None:
    tools = SessionTools(FakeRecall([]))  # type: ignore[arg-type]
    assert tools.call("session_trace", {}, Caller(None, ALPHA)).text == (
        "Error: session query tools need the calling agent's session")
    assert tools.call("session_search", {"query": "x"}, Caller("me", None)).text == (
        "Error: session target is outside the caller workspace")


def test_own_event_search_without_a_step_is_no_current_step(recall: Recall) -> None:
    tools = SessionTools(recall)
    text = run(tools, "session_event_search", Caller("alpha-child", ALPHA), query="widget")
    assert text.startswith("Error: the current session has no step to search before: ")
    assert "recall append SESSION --events FILE" in text


def test_clamp_that_empties_the_range_skips_search(recall: Recall) -> None:
    tools = SessionTools(recall)
    # The caller's last step starts at seq 6, so seq_from 6 leaves nothing "prior".
    assert run(tools, "session_event_search", query="widget", seq_from=6) == (
        "No prior event matches found.")
    assert run(tools, "session_event_search", query="widget", seq_to=3).endswith(
        "1. seq 3 | user/message | current | 2025-11-24T16:00:00.004Z\n"
        "   Snippet: Deploy the widget pipeline to staging.")


def test_self_whose_header_left_the_workspace_is_refused(recall: Recall) -> None:
    # The caller claims /work/alpha but its session header says /work/beta.
    tools = SessionTools(recall)
    caller = Caller("beta-secret", ALPHA)
    for name, args in [("session_trace", {}), ("session_event_read", {"seq": 0}),
                       ("session_event_search", {"query": "widget"})]:
        assert tools.call(name, args, caller).text == (
            "Error: session target is outside the caller workspace")


def test_reference_never_appends(recall: Recall) -> None:
    before = recall.read_session("alpha-root")["events"]
    tools = SessionTools(recall)
    assert "<referenced-sessions>" in run(tools, "session_reference",
                                          session_ids=["alpha-child", "alpha-grandchild"])
    assert recall.read_session("alpha-root")["events"] == before
    assert run(tools, "session_reference", session_ids=["alpha-root"]) == (
        "Error: a session cannot reference itself")
    assert run(tools, "session_reference",
               session_ids=["alpha-child", "alpha-lost", "alpha-orphan", "alpha-grandchild"]) == (
        "Error: too many referenced sessions (at most 3)")
    # One outside source spoils the whole reference; nothing partial comes back.
    assert run(tools, "session_reference", session_ids=["alpha-child", "beta-secret"]) == (
        "Error: session target is outside the caller workspace")


def test_time_filters_use_inclusive_sub_millisecond_bounds(recall: Recall) -> None:
    tools = SessionTools(recall)
    at = "2025-11-24T16:00:00.004"  # seq 3 of the caller happened at exactly this ms
    hit = "1. seq 3 | user/message"
    assert hit in run(tools, "session_event_search", query="widget", time_from=at + "Z",
                      time_to=at + "000Z")
    # A from bound inside the ms excludes it; a to bound inside the ms keeps it.
    assert hit not in run(tools, "session_event_search", query="widget",
                          time_from=at + "1Z")
    assert hit in run(tools, "session_event_search", query="widget", time_to=at + "9Z",
                      time_from="2025-11-24T17:00:00.004+01:00")
