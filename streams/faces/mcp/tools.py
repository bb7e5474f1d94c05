"""Agent tools: the PROTOCOL §6 operations over a `Recall` object, each answering one text block."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.codec import parse_js
from projections.errors import SESSION_REFERENCE_SELF_REFERENCE, SESSION_REFERENCE_TOO_MANY
from projections.snapshot import PROMPT_PREFIX, PROMPT_SUFFIX
from streams.facade import Recall, SearchOptions, search_request
from streams.faces.mcp import render
from streams.faces.mcp.args import (
    SPECS,
    Limits,
    input_schema,
    int_range,
    non_empty,
    parse_args,
    query_text,
)
from streams.faces.mcp.auth import Caller, Workspace
from streams.faces.mcp.errors import (
    INVALID_CURSOR,
    NO_CURRENT_STEP,
    REPEATED_CURSOR_MESSAGE,
    TOOL_FAILED,
    ToolError,
    to_tool_error,
    unauthorized,
)
from streams.faces.mcp.timestamps import range_bounds

DEFAULT_MAX_SEARCH_RESULTS = 100
STEP_START = "step/start"

DESCRIPTIONS: dict[str, str] = {
    "session_search": "Search prior sessions of this workspace for a literal phrase; one best "
                      "match per session. Results are cursor-free and workspace-scoped.",
    "session_event_search": "Search the events of one session (default: this one, up to the "
                            "current step) for a literal phrase.",
    "session_trace": "Lineage of a session: ancestors and descendants in this workspace.",
    "session_event_trace": "How one event relates to others: replacements (compaction) and "
                           "cited sources.",
    "session_event_read": "Read one event as JSON (without data.raw unless include_raw), with "
                          "optional neighbours.",
    "session_reference": "Prepare a read-only snapshot of up to three sessions for your next "
                         "message (dry run: nothing is appended). Returns the context text.",
}

#: Tools that run alone and under the search timeout (PROTOCOL §6.1 "exclusive").
EXCLUSIVE = frozenset({"session_search", "session_event_search", "session_reference"})
#: The `tool:session-query` prompt section (PROTOCOL §6), offered as server instructions.
INSTRUCTIONS = (
    "Use session_search to find relevant work from prior sessions, or session_event_search to "
    "search earlier events in one session. Search results are cursor-free and "
    "workspace-scoped. Follow a useful hit with session_trace, session_event_trace, or "
    "session_event_read when you need lineage, relationships, or exact data.")


@dataclass(frozen=True)
class ToolAnswer:
    text: str
    is_error: bool = False


Page = Mapping[str, Any]


class SessionTools:
    """The tool layer. It knows only the `Recall` facade, so it works over either runtime."""

    def __init__(self, recall: Recall, *,
                 max_search_results: int = DEFAULT_MAX_SEARCH_RESULTS) -> None:
        if isinstance(max_search_results, bool) or max_search_results < 1:
            raise ValueError("max_search_results must be at least 1")
        self.recall = recall
        self.max_search_results = max_search_results
        settings = getattr(recall, "settings", None)
        self.limits = Limits() if settings is None else Limits(
            read_window_max=settings.read_window_max, max_references=settings.max_references)
        self._handlers: dict[str, Callable[[Workspace, dict[str, Any]], str]] = {
            "session_search": self.session_search,
            "session_event_search": self.session_event_search,
            "session_trace": self.session_trace,
            "session_event_trace": self.session_event_trace,
            "session_event_read": self.session_event_read,
            "session_reference": self.session_reference,
        }

    @staticmethod
    def names() -> list[str]:
        return list(SPECS)

    def schema(self, name: str) -> dict[str, Any]:
        """The tool's input schema, with this server's bounds (its settings)."""
        return input_schema(name, self.limits)

    def call(self, name: str, arguments: Mapping[str, Any] | None, caller: Caller) -> ToolAnswer:
        """Run one tool; every failure comes back as `Error: <fixed message>`, never raised."""
        try:
            handler = self._handlers.get(name)
            if handler is None:
                return ToolAnswer(f"Error: unknown tool {name[:64]!r}", is_error=True)
            args = parse_args(name, arguments, self.limits)
            return ToolAnswer(handler(Workspace(self.recall, caller), args))
        except Exception as exc:
            return ToolAnswer(to_tool_error(exc).render(), is_error=True)

    # --- paging -------------------------------------------------------------------------------

    def _collect(self, fetch: Callable[[str | None], Page],
                 accept: Callable[[Mapping[str, Any]], bool]) -> tuple[list[Any], bool]:
        """Follow provider cursors until the last page or `max_search_results` accepted items.
        'Capped' only when another *accepted* item exists beyond the cap."""
        accepted: list[Any] = []
        seen: set[str] = set()
        cursor: str | None = None
        while True:
            page = fetch(cursor)
            for item in page.get("items") or []:
                if not accept(item):
                    continue
                if len(accepted) >= self.max_search_results:
                    return accepted, True
                accepted.append(item)
            next_cursor = page.get("nextCursor")
            if next_cursor is None:
                return accepted, False
            if next_cursor in seen:
                raise ToolError(INVALID_CURSOR, REPEATED_CURSOR_MESSAGE)
            seen.add(next_cursor)
            cursor = next_cursor

    # --- session_search -----------------------------------------------------------------------

    def session_search(self, ws: Workspace, args: dict[str, Any]) -> str:
        query = query_text(args["query"])
        non_empty(args, "session_ids", "parent_session_ids", "availability", "event_types",
                  "event_surfaces")
        created = range_bounds("created_at_from", args.get("created_at_from"),
                               "created_at_to", args.get("created_at_to"))
        seqs = int_range(args, "event_seq_from", "event_seq_to")
        times = range_bounds("event_time_from", args.get("event_time_from"),
                             "event_time_to", args.get("event_time_to"))
        if ws.cwd is None:
            raise unauthorized()
        session_ids = ws.resolve_many(args["session_ids"]) if "session_ids" in args else []
        parents: list[str | None] = []
        if "parent_session_ids" in args or args.get("include_root_sessions"):
            # Pre-authorize requested parents in one listing; hidden and missing parents both
            # simply do not survive, and with nothing left we answer without searching at all.
            requested = list(dict.fromkeys(args.get("parent_session_ids") or []))
            allowed = ws.records(requested)
            parents = [p for p in requested if p in allowed]
            if args.get("include_root_sessions"):
                parents.append(None)
            if not parents:
                return render.NO_SESSION_MATCHES
        options = SearchOptions(
            query=query, cwd=ws.cwd, session_ids=session_ids, created_from=created[0],
            created_to=created[1], availability=args.get("availability") or (),
            parents=parents, seq_from=seqs[0], seq_to=seqs[1], time_from=times[0],
            time_to=times[1], types=args.get("event_types") or (),
            surfaces=args.get("event_surfaces") or (),
            no_injected=bool(args.get("exclude_injected")), mode=args.get("mode"))

        def fetch(cursor: str | None) -> Page:
            return self.recall.search_sessions(
                request=search_request(options._replace(cursor=cursor)))

        def accept(item: Mapping[str, Any]) -> bool:
            header = item.get("header") or {}
            session_id = header.get("id")
            return (isinstance(session_id, str) and not ws.is_self(session_id)
                    and ws.header_ok(session_id, header)
                    and (item.get("bestMatch") or {}).get("sessionId") == session_id)

        items, capped = self._collect(fetch, accept)
        if not items:
            return render.NO_SESSION_MATCHES
        ids = [str(i["header"]["id"]) for i in items]
        titles = ws.titles(ids)
        parent_ids = [p for i in items if isinstance(p := i["header"].get("parentSession"), str)]
        visible = set(ws.records(p for p in parent_ids if not ws.is_self(p)))
        hits = []
        for item in items:
            parent = item["header"].get("parentSession")
            if parent is None:
                shown = "root"
            elif isinstance(parent, str) and (parent in visible or ws.is_self(parent)):
                shown = parent
            else:
                shown = render.OUTSIDE_WORKSPACE
            hits.append(render.SessionHit(item, titles[str(item["header"]["id"])], shown))
        return render.session_search(hits, capped)

    # --- session_event_search -----------------------------------------------------------------

    def session_event_search(self, ws: Workspace, args: dict[str, Any]) -> str:
        target = ws.resolve(args.get("session_id", ws.session_id))
        query = query_text(args["query"])
        non_empty(args, "event_types", "surfaces")
        seq_from, seq_to = int_range(args, "seq_from", "seq_to")
        times = range_bounds("time_from", args.get("time_from"), "time_to", args.get("time_to"))
        ws.authorize(target)
        if ws.is_self(target):
            # The active step (its messages, output and this very tool call) is not "prior".
            steps = self.recall.filter_events(target, [{"kind": "type", "values": [STEP_START]}])
            ws.recheck(target, steps.get("session"))
            if not steps.get("events"):
                raise ToolError(NO_CURRENT_STEP)
            ceiling = int(steps["events"][-1]["seq"]) - 1
            seq_to = ceiling if seq_to is None else min(seq_to, ceiling)
            if seq_to < 0 or (seq_from is not None and seq_from > seq_to):
                return render.NO_EVENT_MATCHES
        options = SearchOptions(
            query=query, session_id=target, seq_from=seq_from, seq_to=seq_to,
            time_from=times[0], time_to=times[1], types=args.get("event_types") or (),
            surfaces=args.get("surfaces") or (), no_injected=bool(args.get("exclude_injected")),
            mode=args.get("mode"))

        def fetch(cursor: str | None) -> Page:
            page = self.recall.search_events(
                request=search_request(options._replace(cursor=cursor)))
            ws.recheck(target, page.get("session"))
            return page

        hits, capped = self._collect(fetch, lambda hit: hit.get("sessionId") == target)
        if not hits:
            return render.NO_EVENT_MATCHES
        return render.event_search(target, ws.title(target), hits, capped)

    # --- session_trace ------------------------------------------------------------------------

    def session_trace(self, ws: Workspace, args: dict[str, Any]) -> str:
        target = ws.resolve(args.get("session_id", ws.session_id))
        ws.authorize(target)
        trace = self.recall.trace_session(target)
        ws.recheck(target, trace.get("session"))
        members = [h["id"] for h in trace.get("ancestors") or []]
        stack = list(trace.get("descendants") or [])
        while stack:
            node = stack.pop()
            members.append(node["header"]["id"])
            stack.extend(node.get("children") or [])
        visible = ws.records([target, *members])

        def allowed(header: Mapping[str, Any]) -> bool:
            session_id = header.get("id")
            if not isinstance(session_id, str) or session_id not in visible:
                return False
            ws.recheck(session_id, header)  # listing said ours: the trace must agree
            return True

        ancestors: list[str] = []
        shown_ids: list[str] = [target]
        boundary = not trace.get("complete", False)
        for header in trace.get("ancestors") or []:
            if not allowed(header):
                boundary = True
                break
            ancestors.append(str(header["id"]))
            shown_ids.append(str(header["id"]))
        is_root = not ancestors and not boundary
        tree: list[tuple[int, Mapping[str, Any] | None]] = []
        walk: list[tuple[int, Mapping[str, Any]]] = [
            (0, n) for n in reversed(trace.get("descendants") or [])]
        while walk:  # preorder, iterative: lineages can be thousands deep
            depth, node = walk.pop()
            if not allowed(node["header"]):
                tree.append((depth, None))  # the marker replaces the node and prunes its subtree
                continue
            tree.append((depth, node["header"]))
            shown_ids.append(str(node["header"]["id"]))
            walk.extend((depth + 1, child) for child in reversed(node.get("children") or []))
        titles = ws.titles(shown_ids)
        ancestor_lines = [f"{a} — {titles[a]}" for a in ancestors]
        if boundary:
            ancestor_lines.append(render.OUTSIDE_BOUNDARY)
        lines = [render.TreeLine(d, render.OUTSIDE_SUBTREE if h is None
                                 else f"{h['id']} — {titles[str(h['id'])]}") for d, h in tree]
        return render.session_trace(target, titles[target], int(trace["session"]["createdAt"]),
                                    visible.get(target), ancestor_lines, is_root, lines)

    # --- session_event_trace / session_event_read ---------------------------------------------

    def session_event_trace(self, ws: Workspace, args: dict[str, Any]) -> str:
        target = ws.resolve(args.get("session_id", ws.session_id))
        ws.authorize(target)
        trace = self.recall.trace_event(target, args["seq"])
        ws.recheck(target, trace.get("session"))
        read = self.recall.read_event(target, args["seq"])
        ws.recheck(target, read.get("session"))
        return render.event_trace(target, read["event"], trace)

    def session_event_read(self, ws: Workspace, args: dict[str, Any]) -> str:
        target = ws.resolve(args.get("session_id", ws.session_id))
        ws.authorize(target)
        read = self.recall.read_event(target, args["seq"], before=args.get("before", 0),
                                      after=args.get("after", 0))
        ws.recheck(target, read.get("session"))
        return render.event_read(target, read, args.get("before", 0) > 0,
                                 args.get("after", 0) > 0,
                                 include_raw=bool(args.get("include_raw")))

    # --- session_reference --------------------------------------------------------------------

    def session_reference(self, ws: Workspace, args: dict[str, Any]) -> str:
        non_empty(args, "session_ids")
        sources = list(dict.fromkeys(ws.resolve_many(args["session_ids"])))
        if any(ws.is_self(s) for s in sources):
            raise ToolError(SESSION_REFERENCE_SELF_REFERENCE)
        if len(sources) > self.recall.settings.max_references:
            raise ToolError(SESSION_REFERENCE_TOO_MANY)
        for source in sources:
            ws.authorize(source)
        titles = ws.titles(sources)
        references = [{"sessionId": s, "label": titles[s] if not titles[s].startswith(
            "untitled") else s} for s in sources]
        result = self.recall.prepare_reference(ws.session_id, "", references=references,
                                               dry_run=True)
        if "appended" in result:  # a dry run that appended would be a runtime bug; say nothing
            raise ToolError(TOOL_FAILED)
        context = result.get("additionalContext") or {}
        prompt = str(context["content"][0]["text"])
        # Re-check what was actually captured: every snapshot names its session and cwd.
        data = parse_js(prompt[len(PROMPT_PREFIX):len(prompt) - len(PROMPT_SUFFIX)])
        if [d.get("sessionId") for d in data] != sources:
            raise unauthorized()
        for item in data:
            if not ws.header_ok(item["sessionId"], {"id": item["sessionId"],
                                                    "cwd": item.get("cwd")}):
                raise unauthorized()
        return render.reference(context["source"]["references"], prompt)
