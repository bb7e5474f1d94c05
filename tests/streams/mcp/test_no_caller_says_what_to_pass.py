"""`recall mcp` started without a caller (no `--session`, or `--session-from-hooks` where no hook
reported) says at start-up, on stderr, what to pass, and each tool call's error gives the next
step: `--session ID`, `--cwd DIR`, or the hook line for the agent's settings. A Gemini CLI hook
payload names a Gemini session."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import mcp.types as types
from datadirs import REALDATA, recall_cmd
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from streams.ingest.hook import parse_payload

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _ask(data: Path, errlog_path: Path, *mcp_args: str) -> str:
    async def ask() -> str:
        params = StdioServerParameters(
            command=sys.executable, env=_env(), cwd=str(ROOT),
            args=["-m", "streams", "--data-dir", str(data), "mcp", *mcp_args])
        with errlog_path.open("a") as errlog, anyio.fail_after(60):
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("session_search", {"query": "widget"})
                assert result.is_error
                assert isinstance(result.content[0], types.TextContent)
                return result.content[0].text

    return anyio.run(ask)


def test_a_server_without_a_session_says_what_to_pass(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(REALDATA / "codex-0.125-parent.jsonl")).returncode == 0
    answer = _ask(data, tmp_path / "err.log")
    assert "--session ID --cwd DIR" in answer and "--session-from-hooks" in answer
    assert "recall hook" in answer and "docs/mcp.md" in answer
    stderr = (tmp_path / "err.log").read_text()
    assert "recall mcp: no caller" in stderr and "--session ID" in stderr


def test_a_server_whose_workspace_no_hook_reported_names_the_hook_and_cwd(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(REALDATA / "codex-0.125-parent.jsonl")).returncode == 0
    nowhere = str(tmp_path / "no-agent-ran-here")
    answer = _ask(data, tmp_path / "err.log", "--session-from-hooks", "--cwd", nowhere)
    assert nowhere in answer and "--cwd DIR" in answer
    assert "~/.claude/settings.json" in answer and 'notify = ["recall", "hook"]' in answer
    stderr = (tmp_path / "err.log").read_text()
    assert "recall mcp: no caller yet" in stderr and nowhere in stderr


def test_a_gemini_cli_hook_payload_names_a_gemini_session() -> None:
    payload = parse_payload(
        b'{"session_id": "8f0e", "transcript_path": "/h/.gemini/tmp/ab/chats/session-1-8f0e.json",'
        b' "cwd": "/w", "hook_event_name": "SessionStart", "timestamp": "2026-01-01T00:00:00Z"}')
    assert payload.agent == "gemini-cli" and payload.session_id == "gemini-cli:8f0e"
    after = parse_payload(b'{"session_id": "8f0e", "cwd": "/w", "hook_event_name": "AfterAgent"}')
    assert after.session_id == "gemini-cli:8f0e"
    claude = parse_payload(b'{"session_id": "c1", "transcript_path": "/h/.claude/projects/p/c1'
                           b'.jsonl", "cwd": "/w", "hook_event_name": "SessionStart"}')
    assert claude.session_id == "claude-code:c1"
