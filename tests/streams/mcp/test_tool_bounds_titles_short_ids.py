"""The agent tools: schemas that state the server's real bounds (derived from validation), titles
in answers, short session ids inside the workspace, injected context left out on request, and
`data.raw` only when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import build_data_dir
from mcp_corpus import ALPHA

from streams.facade import Recall
from streams.faces.mcp import Caller, SessionTools
from streams.faces.mcp.args import MAX_SAFE_INTEGER, SPECS

ME = Caller("alpha-root", ALPHA)
UNAUTHORIZED = "Error: session target is outside the caller workspace"
#: Errors that mean "this value is past the argument's bound".
BOUND_ERRORS = ("Error: invalid arguments", "Error: before and after must be integers",
                "Error: too many referenced sessions")


def run(tools: SessionTools, name: str, caller: Caller = ME, **arguments: Any) -> str:
    return tools.call(name, arguments, caller).text


@pytest.fixture
def narrow(tmp_path: Path) -> Recall:
    """The corpus under settings other than the defaults: bounds must follow the settings."""
    opened = Recall.open(build_data_dir(tmp_path), shards=2, read_window_max=7,
                         max_references=2)
    yield opened  # type: ignore[misc]
    opened.close()


#: Arguments that make each tool's call valid apart from the one under test.
BASE: dict[str, dict[str, Any]] = {
    "session_search": {"query": "widget"},
    "session_event_search": {"query": "widget", "session_id": "alpha-child"},
    "session_trace": {},
    "session_event_trace": {"seq": 3},
    "session_event_read": {"seq": 3},
    "session_reference": {"session_ids": ["alpha-child"]},
}


def _values(prop: dict[str, Any], count: int) -> list[str]:
    choices = prop["items"].get("enum")
    if choices is not None:
        return [choices[n % len(choices)] for n in range(count)]
    return ["alpha-child", "alpha-grandchild", *(f"id-{n}" for n in range(count))][:count]


def test_schema_bounds_are_the_bounds_validation_enforces(narrow: Recall) -> None:
    tools = SessionTools(narrow)
    checked = 0
    for name in SPECS:
        schema = tools.schema(name)
        for arg, prop in schema["properties"].items():
            if "maximum" in prop:
                at, past = prop["maximum"], prop["maximum"] + 1
                ok = run(tools, name, **{**BASE[name], arg: at})
                bad = run(tools, name, **{**BASE[name], arg: past})
            elif "maxItems" in prop:
                ok = run(tools, name, **{**BASE[name], arg: _values(prop, prop["maxItems"])})
                bad = run(tools, name,
                          **{**BASE[name], arg: _values(prop, prop["maxItems"] + 1)})
            else:
                continue
            assert not ok.startswith(BOUND_ERRORS), (name, arg, ok)
            assert bad.startswith(BOUND_ERRORS), (name, arg, bad)
            checked += 1
    assert checked >= 10
    read = tools.schema("session_event_read")["properties"]
    assert read["before"]["maximum"] == read["after"]["maximum"] == 7  # RECALL_READ_WINDOW_MAX
    assert tools.schema("session_reference")["properties"]["session_ids"]["maxItems"] == 2
    assert tools.schema("session_event_read")["properties"]["seq"]["maximum"] == MAX_SAFE_INTEGER
    assert run(tools, "session_event_read", seq=3, before=8) == (
        "Error: before and after must be integers from 0 to 7")
    assert run(tools, "session_reference", session_ids=["a", "b", "c"]) == (
        "Error: too many referenced sessions (at most 2)")


def test_default_schemas_keep_the_spec_bounds(recall: Recall) -> None:
    read = SessionTools(recall).schema("session_event_read")["properties"]
    assert read["before"]["maximum"] == 50


def test_titles_in_answers_come_from_the_listing(recall: Recall) -> None:
    tools = SessionTools(recall)
    found = run(tools, "session_search", query="dashboard")
    # no session/title: the person's first prompt names it
    assert "1. Session alpha-grandchild — Widget metrics dashboard please." in found
    assert run(tools, "session_trace", session_id="alpha-child").startswith(
        "Session alpha-child — Widget retry")


def test_short_ids_resolve_inside_the_workspace_only(recall: Recall) -> None:
    tools = SessionTools(recall)
    full = run(tools, "session_event_read", session_id="alpha-child", seq=2)
    assert run(tools, "session_event_read", session_id="alpha-ch", seq=2) == full
    ambiguous = run(tools, "session_event_read", session_id="alpha-", seq=2)
    assert ambiguous.startswith("Error: the session id alpha- matches 5 sessions of this "
                                "workspace: alpha-child, alpha-grandchild, alpha-lost, "
                                "alpha-orphan, alpha-root; give more of it")
    # a prefix of sessions the caller may not see reads exactly like an unknown id
    for hidden in ("beta-s", "beta-secret", "alpha-t", "no-such-session"):
        assert run(tools, "session_event_read", session_id=hidden, seq=2) == UNAUTHORIZED
    assert "<referenced-sessions>" in run(tools, "session_reference",
                                          session_ids=["alpha-ch", "alpha-g"])
    assert "Session alpha-child" in run(tools, "session_search", query="widget",
                                        session_ids=["alpha-ch"])


def test_exclude_injected_leaves_plugin_messages_out(tmp_path: Path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    events = [
        {"type": "session", "version": 0, "id": "inj", "createdAt": 1_000, "cwd": ALPHA},
        {"type": "step/start", "seq": 0, "time": 1_001, "data": {"turn": 0, "step": 0}},
        {"type": "user/message", "seq": 1, "time": 1_002, "surfaceOp": "append",
         "data": {"id": "m1", "role": "user", "source": {"kind": "plugin", "plugin": "agents-md"},
                  "content": [{"type": "text", "text": "AGENTS.md: zebra conventions"}]}},
        {"type": "user/message", "seq": 2, "time": 1_003, "surfaceOp": "append",
         "data": {"id": "m2", "role": "user", "source": {"kind": "user"},
                  "content": [{"type": "text", "text": "hello"}]}},
    ]
    (sources / "inj.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([sources])
        tools = SessionTools(recall)
        me = Caller("other", ALPHA)
        assert "Session inj" in run(tools, "session_search", me, query="zebra")
        assert run(tools, "session_search", me, query="zebra", exclude_injected=True) == (
            "No prior session matches found.")
        assert "seq 1" in run(tools, "session_event_search", me, session_id="inj",
                              query="zebra")
        assert run(tools, "session_event_search", me, session_id="inj", query="zebra",
                   exclude_injected=True) == "No prior event matches found."


def test_event_read_ships_data_raw_only_when_asked(tmp_path: Path) -> None:
    real = Path(__file__).resolve().parents[2] / "data" / "realdata"
    session = "claude-code:deeac353-0765-4439-9056-293619a99172"
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([real / "claude-code-2.1.5-compaction.jsonl"])
        cwd = recall.list_sessions()[0]["header"]["cwd"]
        tools = SessionTools(recall)
        me = Caller(session, cwd)
        plain = run(tools, "session_event_read", me, seq=22)
        raw = run(tools, "session_event_read", me, seq=22, include_raw=True)
    assert '"raw"' not in plain and '"raw"' in raw
    assert len(raw) > len(plain)
    assert plain.startswith(f"Session {session}\nTarget: seq 22 | user/message")
