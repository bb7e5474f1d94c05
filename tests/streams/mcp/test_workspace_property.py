"""Agent tools, property: for random workspaces, lineages and callers, no tool output ever names a
session outside the caller's workspace, and a hidden target answers exactly like a missing one."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_corpus import header, log_only, message

from streams.facade import Recall
from streams.faces.mcp import Caller, SessionTools

WORKSPACES = ["/w/a", "/w/b", "/w/a", "/w/b", "/w/c", None]  # repeats: more overlap
# Equal-length ids: no id can occur inside another, so a substring check is exact.
IDS = st.text(alphabet="abcdefghjkmnpqrstuvwxy", min_size=7, max_size=7).map(lambda s: f"s-{s}")


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(IDS, min_size=2, max_size=6, unique=True))
    missing = draw(st.lists(IDS.filter(lambda i: i not in ids), min_size=1, max_size=2,
                            unique=True))
    sessions = []
    for n, session_id in enumerate(ids):
        parent = draw(st.one_of(st.none(), st.sampled_from(ids[:n] + missing + ids)))
        sessions.append({"id": session_id, "cwd": draw(st.sampled_from(WORKSPACES)),
                         "parent": None if parent == session_id else parent,
                         "created": 1_700_000_000_000 + n * 1000})
    caller_id = draw(st.sampled_from(ids + ids + missing))
    # Usually a workspace that has sessions, so the authorized paths are exercised too.
    caller_cwd = draw(st.sampled_from([s["cwd"] for s in sessions] * 3 + WORKSPACES))
    return {"sessions": sessions, "missing": missing, "caller": Caller(caller_id, caller_cwd),
            "targets": draw(st.lists(st.sampled_from(ids + ids + missing), min_size=1, max_size=3)),
            "roots": draw(st.booleans())}


def _log(spec: dict[str, Any]) -> list[dict[str, Any]]:
    t = spec["created"]
    # The title names the session: reading a foreign title would leak a foreign id.
    return [header(spec["id"], spec["cwd"], created=t, parent=spec["parent"]),
            log_only("session/title", 0, t + 1, {"title": f"title of {spec['id']}"}),
            log_only("step/start", 1, t + 2, {"turn": 0, "step": 0}),
            message("user", 2, t + 3, f"needle asked in {spec['id']}"),
            message("assistant", 3, t + 4, "needle answered"),
            log_only("step/start", 4, t + 5, {"turn": 0, "step": 1})]


def _calls(world: dict[str, Any], target: str) -> list[tuple[str, dict[str, Any]]]:
    search: dict[str, Any] = {"query": "needle", "parent_session_ids": [target]}
    if world["roots"]:
        search["include_root_sessions"] = True
    return [("session_event_search", {"session_id": target, "query": "needle"}),
            ("session_trace", {"session_id": target}),
            ("session_event_trace", {"session_id": target, "seq": 2}),
            ("session_event_read", {"session_id": target, "seq": 2, "before": 2, "after": 2}),
            ("session_reference", {"session_ids": [target]}),
            ("session_search", {"query": "needle", "session_ids": [target]}),
            ("session_search", search)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_no_output_names_a_session_outside_the_workspace(world: dict[str, Any]) -> None:
    caller: Caller = world["caller"]
    own = {s["id"] for s in world["sessions"] if caller.cwd is not None and s["cwd"] == caller.cwd}
    foreign = ({s["id"] for s in world["sessions"]} | set(world["missing"])) - own - {
        caller.session_id}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        for spec in world["sessions"]:
            (root / "src" / f"{spec['id']}.jsonl").write_text(
                "".join(json.dumps(line) + "\n" for line in _log(spec)))
        with Recall.open(root / "data", shards=1) as recall:
            recall.ingest([root / "src"])
            tools = SessionTools(recall, max_search_results=3)
            outputs = [tools.call("session_search", {"query": "needle"}, caller).text,
                       tools.call("session_trace", {}, caller).text,
                       tools.call("session_event_search", {"query": "needle"}, caller).text]
            for target in world["targets"]:
                outputs += [tools.call(n, a, caller).text for n, a in _calls(world, target)]
            # Lineage of every session: redaction of ancestors and descendants in all shapes.
            outputs += [tools.call("session_trace", {"session_id": s["id"]}, caller).text
                        for s in world["sessions"]]
            # A hidden session and a session that never existed must be indistinguishable.
            stand_in = "s-zzzzzzz"
            for target in sorted(foreign & {s["id"] for s in world["sessions"]}):
                hidden = [tools.call(n, a, caller).text for n, a in _calls(world, target)]
                absent = [tools.call(n, a, caller).text for n, a in _calls(world, stand_in)]
                assert hidden == absent
    for text in outputs:
        leaked = sorted(i for i in foreign if i in text)
        assert not leaked, (leaked, text)
