"""Agent tools, the running session: who the caller is when only a hook knows it, its transcript
ingested on demand, and a clear answer when its own session is not indexed yet.

The caller is still configuration, never a tool argument: `--session ID`, or with
`--session-from-hooks` the session a `recall hook` reported most recently for the server's
workspace (`--cwd`, else the process's working directory). Before each tool call, the caller's
transcript (when a hook recorded its path) is ingested if it grew — a stat when it did not —
without waiting for the writer lock (a watcher or an ingest holding it will index it anyway).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from streams.facade import Recall, hook_report, latest_hook_report, transcript_files
from streams.faces.textsafe import visible

log = logging.getLogger("recall.mcp")

#: Tools whose default target is the caller's own session (and session_reference, which
#: prepares a reference *for* it).
SELF_TOOLS = frozenset({"session_event_search", "session_trace", "session_event_trace",
                        "session_event_read", "session_reference"})


#: The hook lines per host, for the hints of a server that does not know its caller.
HOOKS_HINT = ("add `recall hook` to the agent's hooks (Claude Code: SessionStart and Stop hooks in "
              "~/.claude/settings.json; Gemini CLI: SessionStart and AfterAgent hooks in "
              "~/.gemini/settings.json; Codex: notify = [\"recall\", \"hook\"] in "
              "~/.codex/config.toml; docs/mcp.md has each block)")


def no_caller(from_hooks: bool, where: str | None) -> str:
    """What to do when the server does not know who calls it: the next step, not just the fact."""
    if from_hooks:
        return (f"no `recall hook` has reported a session for the workspace {visible(where or '?')}"
                f": {HOOKS_HINT}; or start the server with `--cwd DIR` naming the directory the "
                "agent runs in, or with `--session ID`")
    return ("the server was started without the caller's session: start it as `recall mcp "
            "--session ID --cwd DIR`, or as `recall mcp --session-from-hooks` and "
            f"{HOOKS_HINT}")


class RunningSession:
    """The caller's own session, as hooks reported it."""

    def __init__(self, recall: Recall, data_dir: Path | None) -> None:
        self.recall = recall
        self.data_dir = data_dir

    def from_hooks(self, cwd: str | None) -> tuple[str | None, str | None]:
        """(session id, cwd) of the newest hook report for this workspace."""
        if self.data_dir is None:
            return None, cwd
        where = cwd or os.path.abspath(os.getcwd())
        found = latest_hook_report(self.data_dir, where)
        if found is None:
            return None, where
        return str(found["sessionId"]), where

    def refresh(self, session_id: str) -> None:
        """Ingest the caller's transcript if a hook named it and it grew (embedded only; never
        waits for another writer)."""
        found = hook_report(self.data_dir, session_id) if self.data_dir is not None else None
        path = found.get("transcriptPath") if found else None
        if not isinstance(path, str) or not Path(path).is_file():
            return
        try:
            self.recall.ingest_unless_busy(transcript_files(Path(path)))
        except Exception as exc:  # the tool call still answers from what is indexed
            log.warning("on-demand ingest of the caller's transcript failed: %s",
                        type(exc).__name__)

    def indexed(self, session_id: str) -> bool:
        try:
            found = self.recall.filter_sessions([{"kind": "id", "values": [session_id]}])
        except Exception:
            return True  # let the tool report the real failure
        return any(r.get("header", {}).get("id") == session_id for r in found)

    def missing(self, name: str, arguments: dict[str, Any], session_id: str) -> str | None:
        """The answer for a tool about the caller's own session when it is not indexed."""
        if name not in SELF_TOOLS or arguments.get("session_id", session_id) != session_id:
            return None
        if self.indexed(session_id):
            return None
        found = hook_report(self.data_dir, session_id) if self.data_dir is not None else None
        path = found.get("transcriptPath") if found else None
        if found is None:
            why = ("no hook has reported its transcript yet (add `recall hook` to the agent's "
                   "SessionStart and Stop hooks, or run `recall watch`)")
        elif not isinstance(path, str):
            why = "its hook named no transcript file"
        elif not Path(path).is_file():
            why = f"its transcript {visible(path)} does not exist yet"
        else:
            why = (f"its transcript {visible(path)} holds no complete session yet, or another "
                   "writer is busy (retry shortly)")
        return (f"Error: the current session {visible(session_id)} is not indexed yet: {why}. "
                "session_search across other sessions works meanwhile.")
