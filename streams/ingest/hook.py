"""Ingest edge, agent hooks: `recall hook` — an agent tells recall where its running session's
transcript is, and recall ingests it at once (no waiting for a watcher).

- Claude Code runs hook commands with a JSON object on stdin carrying `session_id`,
  `transcript_path`, `cwd` and `hook_event_name` (SessionStart, Stop, PreCompact, SessionEnd, …).
- Gemini CLI's hooks send the same fields on stdin; its transcript is a JSON document
  (`chats/session-*.json`), so a `.json` transcript or a Gemini-only event names a Gemini session.
- Codex runs its `notify` program with one JSON argument `{"type": "agent-turn-complete",
  "thread-id", "turn-id", "cwd", "input-messages", "last-assistant-message"}`; it names no
  transcript, so the rollout whose file name ends in the thread id is looked up under
  `$CODEX_HOME/sessions` (default `~/.codex/sessions`).

Each payload is recorded in `<data_dir>/hooks/<digest of the session id>.json`
(`{sessionId, agent, transcriptPath, cwd, event, at}`, owner-only; the id never becomes a path),
so the MCP server can find and ingest its caller's transcript on demand. A hook never fails the
agent: every error is logged to `<data_dir>/log/recall.log`, and the command exits 0 quickly
(the writer lock is waited for at most `--lock-timeout-s`; if a long ingest holds it, the
watcher or the next hook picks the transcript up). Nothing is printed on stdout, which Claude
Code would add to the model's context at SessionStart.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections.codec import JSONDecodeError, dumps, loads, loads_lossless
from projections.errors import UsageError
from streams.core.atomic import replace_file
from streams.core.store import ensure_private_dir

HOOKS_DIR = "hooks"
#: Agent session id → recall session id (the importers' prefix).
PREFIX = {"claude-code": "claude-code:", "codex": "codex:", "gemini-cli": "gemini-cli:"}
#: Events only Gemini CLI's hooks fire (its payload otherwise has Claude Code's field names).
GEMINI_EVENTS = frozenset({"BeforeAgent", "AfterAgent", "BeforeModel", "AfterModel",
                           "BeforeToolSelection", "BeforeTool", "AfterTool", "PreCompress"})


@dataclass(frozen=True, slots=True)
class HookPayload:
    """What a hook told us: whose session, where its transcript is, which event fired."""

    agent: str
    session_id: str  # recall's id (`claude-code:<uuid>`, `codex:<thread id>`)
    transcript: Path | None
    cwd: str | None
    event: str

    def to_json(self) -> dict[str, Any]:
        return {"sessionId": self.session_id, "agent": self.agent,
                "transcriptPath": str(self.transcript) if self.transcript else None,
                "cwd": self.cwd, "event": self.event, "at": int(time.time() * 1000)}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def codex_rollout(thread_id: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The newest rollout file of a Codex thread (`rollout-<time>-<thread id>.jsonl[.zst]`)."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser()
    found = [p for p in (home / "sessions").rglob(f"rollout-*{thread_id}.jsonl*")
             if p.name.endswith((f"{thread_id}.jsonl", f"{thread_id}.jsonl.zst"))]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def parse_payload(stdin: bytes, argv: tuple[str, ...] = (),
                  environ: Mapping[str, str] | None = None) -> HookPayload:
    """A Claude Code payload (stdin) or a Codex `notify` payload (the last argument)."""
    raw = argv[-1].encode("utf-8") if argv else stdin
    try:
        value = loads_lossless(raw.strip())
    except Exception as exc:
        raise UsageError(f"the hook payload is not one JSON object ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError("the hook payload is not a JSON object")
    claude_id = _text(value.get("session_id"))
    if claude_id is not None:
        path = _text(value.get("transcript_path"))
        event = _text(value.get("hook_event_name")) or "unknown"
        # Gemini CLI sends the same fields; its transcript is one JSON document, not JSON lines.
        gemini = event in GEMINI_EVENTS or (path is not None and path.endswith(".json"))
        agent = "gemini-cli" if gemini else "claude-code"
        return HookPayload(agent, PREFIX[agent] + claude_id,
                           Path(path).expanduser() if path else None, _text(value.get("cwd")),
                           event)
    thread = _text(value.get("thread-id"))
    if thread is not None:
        return HookPayload("codex", PREFIX["codex"] + thread, codex_rollout(thread, environ),
                           _text(value.get("cwd")), _text(value.get("type")) or "unknown")
    raise UsageError("the hook payload names no session (neither Claude Code's `session_id` "
                     "nor Codex's `thread-id`)")


def _record_path(data_dir: Path, session_id: str) -> Path:
    name = hashlib.blake2b(session_id.encode("utf-8"), digest_size=16).hexdigest()
    return data_dir / HOOKS_DIR / f"{name}.json"


def record(data_dir: Path, payload: HookPayload) -> None:
    """Remember the session's transcript and cwd (the newest payload wins)."""
    ensure_private_dir(data_dir / HOOKS_DIR)
    replace_file(_record_path(data_dir, payload.session_id), dumps(payload.to_json()))


def lookup(data_dir: Path, session_id: str) -> dict[str, Any] | None:
    """What the hooks recorded for a session, if anything."""
    try:
        value = loads(_record_path(data_dir, session_id).read_bytes())
    except (OSError, JSONDecodeError):
        return None
    return value if isinstance(value, dict) and value.get("sessionId") == session_id else None


def latest_for_cwd(data_dir: Path, cwd: str) -> dict[str, Any] | None:
    """The session a hook reported most recently for this working directory."""
    best: dict[str, Any] | None = None
    for path in (data_dir / HOOKS_DIR).glob("*.json"):
        try:
            value = loads(path.read_bytes())
        except (OSError, JSONDecodeError):
            continue
        if isinstance(value, dict) and value.get("cwd") == cwd and isinstance(
                value.get("at"), int) and (best is None or value["at"] > best["at"]):
            best = value
    return best


def transcript_files(transcript: Path) -> list[Path]:
    """The transcript, and the subagent transcripts Claude Code keeps beside it
    (`<session>/subagents/*.jsonl`) when there are any."""
    files = [transcript]
    beside = transcript.with_suffix("") / "subagents"
    if beside.is_dir():
        files.append(beside)
    return files
