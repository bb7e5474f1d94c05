"""MCP over stdio (the SDK client) for a running Claude Code session that recall knows only
through a hook payload: its own event search first explains what is missing, then works as soon
as the transcript exists — ingested on demand, also after it grows — while cross-session search
works throughout. `recall hook` exits 0 on any input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import orjson
from datadirs import REALDATA, recall_cmd
from factories import header, user
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[3]
TRANSCRIPT = REALDATA / "claude-code-2.1.14-compaction.jsonl"
AGENT_ID = "839b35f7-4dbd-4d93-9772-3c272cc87caa"
SESSION = f"claude-code:{AGENT_ID}"
CWD = "/Users/soph/Work/entire/devenv/cli"  # what the transcript records


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _text(result: types.CallToolResult) -> str:
    assert isinstance(result.content[0], types.TextContent)
    return result.content[0].text


def _hook(data: Path, transcript: Path, event: str) -> None:
    payload = {"session_id": AGENT_ID, "transcript_path": str(transcript), "cwd": CWD,
               "hook_event_name": event, "source": "startup"}
    done = recall_cmd(data, "hook", stdin=orjson.dumps(payload))
    assert done.returncode == 0 and done.stdout == b""


async def _conversation(data: Path, transcript: Path) -> list[str]:
    lines = TRANSCRIPT.read_bytes().splitlines(keepends=True)
    params = StdioServerParameters(
        command=sys.executable, env=_env(), cwd=str(ROOT),
        args=["-m", "streams", "--data-dir", str(data), "mcp", "--session-from-hooks",
              "--cwd", CWD])
    out: list[str] = []

    async def call(session: ClientSession, name: str, args: dict[str, Any]) -> None:
        out.append(_text(await session.call_tool(name, args)))

    with (data.parent / "mcp-stderr.log").open("a") as errlog, anyio.fail_after(60):
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # 0: the hook ran at SessionStart, before the agent wrote its transcript
            await call(session, "session_event_search", {"query": "another try"})
            await call(session, "session_search", {"query": "widget"})
            # 2: the agent writes its first lines: ingested on demand by the next call
            transcript.write_bytes(b"".join(lines[:30]))
            await call(session, "session_event_search", {"query": "another try"})
            # 3: it keeps working; the grown part is searchable at the next call
            with transcript.open("ab") as f:
                f.write(b"".join(lines[30:]))
            await call(session, "session_event_search", {"query": "real issue"})
            await call(session, "session_trace", {})
    return out


def test_mcp_for_a_session_known_only_through_a_hook(tmp_path: Path) -> None:
    data = tmp_path / "data"
    other = tmp_path / "other.jsonl"
    other.write_bytes(orjson.dumps(header("earlier-work", cwd=CWD)) + b"\n"
                      + orjson.dumps(user(0, "the widget broke before")) + b"\n")
    assert recall_cmd(data, "ingest", str(other)).returncode == 0
    transcript = tmp_path / "projects" / "-cli" / f"{AGENT_ID}.jsonl"
    transcript.parent.mkdir(parents=True)
    _hook(data, transcript, "SessionStart")  # no transcript yet: recorded, nothing ingested
    missing, cross, early, grown, trace = anyio.run(_conversation, data, transcript)
    assert missing.startswith(f"Error: the current session {SESSION} is not indexed yet")
    assert "does not exist yet" in missing
    assert "earlier-work" in cross  # cross-session search works meanwhile
    assert early.startswith(f"Session {SESSION}") and "Event search results (1)" in early
    assert "real issue" in grown.lower() and "Event search results" in grown
    assert trace.startswith(f"Session {SESSION}")


def test_mcp_explains_a_caller_no_hook_reported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(REALDATA / "codex-0.125-parent.jsonl")).returncode == 0

    async def ask() -> str:
        params = StdioServerParameters(
            command=sys.executable, env=_env(), cwd=str(ROOT),
            args=["-m", "streams", "--data-dir", str(data), "mcp", "--session", "claude-code:x",
                  "--cwd", CWD])
        with (tmp_path / "err.log").open("a") as errlog, anyio.fail_after(60):
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return _text(await session.call_tool("session_event_search", {"query": "x"}))

    answer = anyio.run(ask)
    assert answer.startswith("Error: the current session claude-code:x is not indexed yet")
    assert "no hook has reported its transcript" in answer


def test_hook_ingests_at_once_and_never_fails_the_agent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    transcript = tmp_path / f"{AGENT_ID}.jsonl"
    transcript.write_bytes(TRANSCRIPT.read_bytes())
    _hook(data, transcript, "Stop")
    found = recall_cmd(data, "events", SESSION, "real issue", "--json")
    assert orjson.loads(found.stdout)["items"], found.stderr
    for bad in (b"", b"not json", b"[]", b'{"hook_event_name": "Stop"}'):
        done = recall_cmd(data, "hook", stdin=bad)
        assert done.returncode == 0 and done.stdout == b""
    assert b"recall hook" in (data / "log" / "recall.log").read_bytes()
    # Codex: notify passes the JSON as the last argument; the rollout is found by thread id
    codex_home = tmp_path / "codex"
    rollout = codex_home / "sessions" / "2026" / "04" / "29" / (
        "rollout-2026-04-29T22-56-52-019ddb75-a272-7d50-b41d-90017f500b5a.jsonl")
    rollout.parent.mkdir(parents=True)
    rollout.write_bytes((REALDATA / "codex-0.125-parent.jsonl").read_bytes())
    notify = orjson.dumps({"type": "agent-turn-complete",
                           "thread-id": "019ddb75-a272-7d50-b41d-90017f500b5a",
                           "turn-id": "t1", "cwd": "/tmp", "input-messages": ["x"],
                           "last-assistant-message": "done"}).decode()
    done = recall_cmd(data, "hook", notify, env={**_env(), "CODEX_HOME": str(codex_home)})
    assert done.returncode == 0
    listed = recall_cmd(data, "sessions", "--json")
    assert "codex:019ddb75-a272-7d50-b41d-90017f500b5a" in listed.stdout.decode()
