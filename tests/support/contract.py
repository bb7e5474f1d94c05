"""The search/reference contract both runtimes must honour, and the corpus it runs on.

`contract_corpus(dir)` writes the logs; a runtime loads them; `answers(recall)` asks a fixed set of
questions and returns every answer as JSON. Each runtime's test asserts the expectations below
on its own answers, and the Kafka suite also asserts its answers equal the embedded ones.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from factories import assistant, checkpoint, header, log_only, tool_result, user

SAMPLES = Path(__file__).resolve().parents[2] / "streams" / "samples"
#: Fixed "now" so `live` is a pure function of the corpus.
NOW_MS = 1_764_000_100_000


def _write(path: Path, head: dict[str, Any], events: list[dict[str, Any]]) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in [head, *events]) + b"\n")


def contract_corpus(directory: Path) -> list[Path]:
    """The sample sessions plus crafted ones for tokens, CJK, diacritics, ties and lineage."""
    directory.mkdir(parents=True, exist_ok=True)
    for sample in sorted(SAMPLES.glob("*.jsonl")):
        shutil.copy(sample, directory / sample.name)
    _write(directory / "cjk.jsonl", header("cjk", cwd="/w/cjk", created_at=1_764_000_050_000),
           [user(0, "会话搜索功能需要支持中文"), assistant(1, "好的，我们使用 trigram 索引")])
    _write(directory / "cafe.jsonl", header("cafe", cwd="/w/cjk", created_at=1_764_000_060_000),
           [user(0, "Meet at the café near BRAID street", time=1_764_000_060_100),
            assistant(1, "needle needle", time=1_764_000_060_200)])
    _write(directory / "tie-a.jsonl", header("tie-a", cwd="/w/t", created_at=1_764_000_070_000),
           [user(0, "needle needle", time=1_764_000_070_000)])
    _write(directory / "tie-b.jsonl", header("tie-b", cwd="/w/t", created_at=1_764_000_070_000),
           [user(0, "needle needle", time=1_764_000_070_000)])
    _write(directory / "child.jsonl",
           header("child", cwd="/w/t", created_at=1_764_000_080_000, parentSession="tie-a"),
           [user(0, "child work on needle"), tool_result(1, "needle output", is_error=True),
            log_only(2, "turn/end", {"reason": "error", "error": {"message": "needle crash"}}),
            checkpoint(3, "needle summary", 0, 1, [0, 1])])
    # Issue 14: a Claude Code session titled by a summary kept in another session's log (the
    # leaf `a1` is the `message.id` of its assistant message), an injected-context message.
    _write(directory / "claude-leaf.jsonl",
           header(CLAUDE_LEAF, cwd="/w/claude/app", created_at=1_764_000_090_000),
           [user(0, "  why do   the shadow\nbranches pile up?  ", time=1_764_000_090_100),
            user(1, "<environment_context>needle env</environment_context>", kind="plugin",
                 plugin="claude-code-meta", time=1_764_000_090_200),
            assistant(2, "They are never deleted after a reset.", time=1_764_000_090_300)])
    _write(directory / "claude-summary.jsonl",
           header(CLAUDE_SUMMARY, cwd="/w/claude", created_at=1_764_000_095_000),
           [log_only(0, "claude-code/summary", {"summary": "Shadow branch cleanup",
                                                "leafUuid": "a2"}, ignorable=True,
                     time=1_764_000_095_000),
            user(1, "needle again", time=1_764_000_095_100)])
    return sorted(directory.glob("*.jsonl"))


CLAUDE_LEAF = "claude-code:5e1c67aa-53e7-4862-81ae-d0e013e3270b"
CLAUDE_SUMMARY = "claude-code:99b35f7a-4dbd-4d93-9772-3c272cc87caa"


def _outcome(call: Callable[[], Any]) -> Any:
    """A call's answer, or its error code (both runtimes must fail alike too)."""
    try:
        return call()
    except Exception as exc:
        return {"error": getattr(exc, "code", type(exc).__name__)}


def drain_pages(call: Callable[[dict[str, Any]], dict[str, Any]],
                request: dict[str, Any]) -> list[list[Any]]:
    """Follow every cursor of `call(request)`; return each page's items (at most 100 pages)."""
    pages: list[list[Any]] = []
    cursor = None
    for _ in range(100):
        page = call({**request, **({"cursor": cursor} if cursor else {})})
        pages.append(page["items"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return pages
    raise AssertionError("paging did not end")


def _drain(recall: Any, method: str, request: dict[str, Any]) -> list[Any]:
    """The items of all pages, in order."""
    pages = drain_pages(lambda r: getattr(recall, method)(request=r), request)
    return [item for page in pages for item in page]


QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("sessions", {"query": "needle"}),
    ("sessions", {"query": "needle", "limit": 2}),
    ("sessions", {"query": "KeyError: 'EUR'"}),
    ("sessions", {"query": "Traceback", "eventFilters": [{"kind": "surface", "values": ["shadowed"]}]}),
    ("sessions", {"query": "EUR", "sessionFilters": [{"kind": "cwd", "values": ["/home/dev/shop"]}]}),
    ("sessions", {"query": "needle", "sessionFilters": [{"kind": "parent", "values": [None]}]}),
    ("sessions", {"query": "CAFE"}),
    ("sessions", {"query": "AI"}),
    ("sessions", {"query": "搜索"}),
    ("sessions", {"query": "needle OR absent"}),
    ("sessions", {"query": "*"}),
    ("sessions", {"query": "needle", "sessionFilters": [{"kind": "id", "values": ["child"]}],
                  "eventFilters": [{"kind": "surface", "values": ["current"]}]}),
    ("events", {"sessionId": "ci-billing-2025-11-24", "query": "EUR"}),
    ("events", {"sessionId": "ci-billing-2025-11-24", "query": "EUR", "limit": 1}),
    ("events", {"sessionId": "child", "query": "needle",
                "filters": [{"kind": "type", "values": ["tool/result", "turn/end"]}]}),
]


def answers(recall: Any) -> dict[str, Any]:
    """Every contract question and its complete answer (all pages), as JSON-able data."""
    out: dict[str, Any] = {}
    for n, (scope, request) in enumerate(QUERIES):
        method = "search_sessions" if scope == "sessions" else "search_events"
        if scope == "sessions":
            items = _drain(_Pinned(recall), method, request)
        else:
            items = _drain(recall, method, request)
        out[f"{n}:{scope}:{orjson.dumps(request).decode()}"] = items
    out["list_sessions"] = [i["header"]["id"] for i in recall.list_sessions()]
    # (the corpus's directories only: a suite may add sessions elsewhere and compare again)
    out["listing"] = recall.list_sessions(
        filters=[{"kind": "cwd-tree", "values": ["/home/dev", "/w/claude", "/w/t"]}],
        now_ms=NOW_MS)
    out["listing:claude"] = recall.list_sessions(agent="claude-code", now_ms=NOW_MS)
    out["listing:cwd-tree"] = recall.list_sessions(cwd="/w/claude/", now_ms=NOW_MS)
    out["listing:title"] = recall.list_sessions(title="SHADOW  branch", limit=5, now_ms=NOW_MS)
    out["resolve:prefix"] = _outcome(lambda: recall.resolve_session("ci-bill"))
    out["resolve:bare"] = _outcome(lambda: recall.resolve_session(CLAUDE_LEAF.split(":")[1]))
    out["resolve:ambiguous"] = _outcome(lambda: recall.resolve_session("tie-"))
    out["resolve:missing"] = _outcome(lambda: recall.resolve_session("nobody"))
    out["surface:short"] = recall.read_surface("5e1c67aa")
    out["events:short"] = recall.search_events("99b35f7a", "needle")
    out["search:not-injected"] = recall.search_sessions(request={
        "query": "needle", "eventFilters": [{"kind": "source",
                                             "values": ["user", "compaction", None]}]},
        now_ms=NOW_MS)
    out["surface:ci"] = recall.read_surface("ci-billing-2025-11-24")
    out["event:ci:7"] = recall.read_event("ci-billing-2025-11-24", 7, before=1, after=1)
    out["trace:ci:7"] = recall.trace_event("ci-billing-2025-11-24", 7)
    out["trace:ci:all"] = [_outcome(lambda s=s: recall.trace_event("ci-billing-2025-11-24", s))
                           for s in range(40)]
    out["transcript:ci:2"] = recall.read_transcript("ci-billing-2025-11-24", page=2, limit=4)
    out["transcript:ci:at"] = recall.read_transcript("ci-billing-2025-11-24", at=9, limit=3)
    out["trace:child"] = recall.trace_session("child")
    out["reference:dry"] = recall.prepare_reference(
        "ci-followup-2025-12-01", "same error?", dry_run=True, message_id="contract",
        references=[{"sessionId": "ci-billing-2025-11-24", "label": "CI"}, {"sessionId": "child"}])
    return out


class _Pinned:
    """Pins `now_ms` so the `live` flag is deterministic across runtimes."""

    def __init__(self, recall: Any) -> None:
        self.recall = recall

    def search_sessions(self, *, request: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = self.recall.search_sessions(request=request, now_ms=NOW_MS)
        return page


def embedded_expectation(tmp_path: Path) -> tuple[list[Path], dict[str, Any], dict[str, Any]]:
    """(corpus files, the embedded runtime's answers, its index digest): what another runtime
    given the same files must reproduce."""
    from streams.facade import Recall

    files = contract_corpus(tmp_path / "corpus")
    with Recall.open(tmp_path / "embedded") as embedded:
        embedded.ingest(files)
        return files, answers(embedded), embedded.index_digest()


def check_expectations(result: dict[str, Any]) -> None:
    """What the contract promises, asserted on one runtime's answers."""
    values = list(result.values())

    def ids(items: list[dict[str, Any]]) -> list[str]:
        return [i["header"]["id"] for i in items]

    needle = values[0]
    # ranking (PROTOCOL §3.6): 2 matches beat 1; among equals, shorter text; tie broken by session id
    assert ids(needle)[:3] == ["cafe", "tie-a", "tie-b"] or ids(needle)[:3] == ["tie-a", "tie-b", "cafe"]
    assert ids(needle).index("tie-a") < ids(needle).index("tie-b")
    assert "child" in ids(needle)
    assert ids(values[1]) == ids(needle)  # paging by 2 returns the same hits, each once
    assert ids(values[2]) == ["ci-billing-2025-11-24"]
    assert values[2][0]["bestMatch"]["surface"] == "shadowed"
    assert ids(values[3]) == ["ci-billing-2025-11-24"]
    assert ids(values[4]) == ["docs-quickstart-2025-11-25", "ci-billing-2025-11-24"] or set(
        ids(values[4])) == {"docs-quickstart-2025-11-25", "ci-billing-2025-11-24"}
    assert "child" not in ids(values[5])
    assert ids(values[6]) == ["cafe"]  # diacritics folded
    assert ids(values[7]) == []  # token match only: AI is not in BRAID
    assert ids(values[8]) == ["cjk"]
    assert ids(values[9]) == [] and ids(values[10]) == []  # query text is data, not syntax
    assert ids(values[11]) == ["child"]
    assert values[11][0]["bestMatch"]["seq"] == 3  # only the checkpoint is current
    assert [h["seq"] for h in values[13]] == [h["seq"] for h in values[12]]
    assert sorted(h["type"] for h in values[14]) == ["tool/result", "turn/end"]
    assert result["surface:ci"]["capturedThroughSeq"] == 38
    assert [e["seq"] for e in result["surface:ci"]["events"]] == [31, 35, 36]
    assert result["trace:ci:7"]["replacementChain"] == [28, 31]
    assert result["trace:child"]["ancestors"][0]["id"] == "tie-a"
    refs = result["reference:dry"]["additionalContext"]["source"]["references"]
    assert [r["sessionId"] for r in refs] == ["ci-billing-2025-11-24", "child"]
    # issue 14: titles, agents, short ids, the injected-context filter
    by_id = {r["header"]["id"]: r for r in result["listing"]}
    assert (by_id[CLAUDE_LEAF]["title"], by_id[CLAUDE_LEAF]["titleSource"]) == (
        "Shadow branch cleanup", "summary")
    assert (by_id[CLAUDE_SUMMARY]["title"], by_id[CLAUDE_SUMMARY]["titleSource"]) == (
        "needle again", "prompt")
    assert (by_id["ci-billing-2025-11-24"]["title"],
            by_id["ci-billing-2025-11-24"]["titleSource"]) == (
        "Fix the failing CI job on main", "agent")
    assert by_id[CLAUDE_LEAF]["agent"] == "claude-code" and by_id["child"]["agent"] == "dsh"
    assert by_id[CLAUDE_LEAF]["eventCount"] == 3
    assert by_id[CLAUDE_LEAF]["firstEventTime"] == 1_764_000_090_100
    assert by_id[CLAUDE_LEAF]["lastEventTime"] == 1_764_000_090_300
    assert [r["header"]["id"] for r in result["listing:claude"]] == [CLAUDE_SUMMARY, CLAUDE_LEAF]
    assert [r["header"]["id"] for r in result["listing:cwd-tree"]] == [CLAUDE_SUMMARY,
                                                                       CLAUDE_LEAF]
    assert [r["header"]["id"] for r in result["listing:title"]] == [CLAUDE_LEAF]
    assert result["resolve:prefix"] == "ci-billing-2025-11-24"
    assert result["resolve:bare"] == CLAUDE_LEAF
    assert result["resolve:ambiguous"] == {"error": "RECALL_AMBIGUOUS_SESSION"}
    assert result["resolve:missing"] == {"error": "SESSION_QUERY_SESSION_NOT_FOUND"}
    assert result["surface:short"]["session"]["id"] == CLAUDE_LEAF
    assert result["events:short"]["session"]["id"] == CLAUDE_SUMMARY
    hits = {i["header"]["id"]: i for i in result["search:not-injected"]["items"]}
    assert CLAUDE_LEAF not in hits and CLAUDE_SUMMARY in hits  # only its env context matched
    assert any(i["header"]["id"] == CLAUDE_LEAF for i in values[0])  # ... which search finds
    assert {"title", "titleSource", "agent", "eventCount"} <= set(values[0][0])
