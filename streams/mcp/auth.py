"""Agent tools: workspace authorization (SPEC 6.2) — who is calling, and what they may see.

Every decision reduces to one question asked the same way for a missing, a hidden and a
tampered session, so the three can never be told apart from the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.errors import SessionQueryError
from streams.facade import Recall
from streams.mcp.errors import MISSING_AGENT, TOOL_FAILED, ToolError, unauthorized

log = logging.getLogger("recall.mcp")

TITLE_EVENT = "session/title"


@dataclass(frozen=True, slots=True)
class Caller:
    """The calling agent: its session id and workspace. Never taken from tool arguments."""

    session_id: str | None
    cwd: str | None


def _dedupe(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class Workspace:
    """Authorization for one tool call: pre-checks targets, re-checks every returned header and
    reads titles once per call."""

    def __init__(self, recall: Recall, caller: Caller) -> None:
        if caller.session_id is None:
            raise ToolError(MISSING_AGENT)
        self.recall = recall
        self.session_id: str = caller.session_id
        self.cwd = caller.cwd
        self._titles: dict[str, str] = {}

    def is_self(self, session_id: str) -> bool:
        return session_id == self.session_id

    def records(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Listing records of the ids the caller may see: one `filter_sessions` with the id list
        and the caller's cwd. Without a caller cwd only the caller itself can qualify."""
        wanted = _dedupe(ids)
        if self.cwd is None:
            wanted = [i for i in wanted if self.is_self(i)]
        if not wanted:
            return {}
        found = self.recall.filter_sessions([{"kind": "id", "values": wanted},
                                             {"kind": "cwd", "values": [self.cwd]}])
        wanted_set = set(wanted)
        return {str(r["header"]["id"]): r for r in found
                if r["header"].get("id") in wanted_set and r["header"].get("cwd") == self.cwd}

    def authorize(self, target: str) -> None:
        """Pre-check a target: self always; anyone else only as exactly one record with the
        caller's cwd."""
        if self.is_self(target):
            return
        if self.cwd is None:
            raise unauthorized()
        found = self.recall.filter_sessions([{"kind": "id", "values": [target]},
                                             {"kind": "cwd", "values": [self.cwd]}])
        if len(found) != 1 or not self.header_ok(target, found[0].get("header")):
            raise unauthorized()

    def header_ok(self, target: str, header: Any) -> bool:
        """Re-check of a returned header: the observed id is the target and its cwd is still the
        caller's (for self too: a session whose header moved workspace is not ours)."""
        return (isinstance(header, Mapping) and header.get("id") == target
                and header.get("cwd") == self.cwd and (self.cwd is not None
                                                       or self.is_self(target)))

    def recheck(self, target: str, header: Any) -> None:
        if not self.header_ok(target, header):
            raise unauthorized()

    def titles(self, ids: Iterable[str]) -> dict[str, str]:
        """The latest `session/title` of each id, read once per call. A failed read renders as
        `untitled (title unavailable: CODE)`; an unauthorized observation fails the call."""
        for session_id in _dedupe(ids):
            if session_id not in self._titles:
                self._titles[session_id] = self._read_title(session_id)
        return self._titles

    def title(self, session_id: str) -> str:
        return self.titles([session_id])[session_id]

    def _read_title(self, session_id: str) -> str:
        try:
            page = self.recall.filter_events(session_id, [{"kind": "type",
                                                           "values": [TITLE_EVENT]}])
        except SessionQueryError as exc:
            log.warning("title of a session unavailable: %s", exc.code)
            return f"untitled (title unavailable: {exc.code})"
        except Exception as exc:
            log.warning("title of a session unavailable: %s", type(exc).__name__)
            return f"untitled (title unavailable: {TOOL_FAILED})"
        self.recheck(session_id, page.get("session"))
        for entry in reversed(page.get("events") or []):
            data = entry.get("event", {}).get("data")
            if isinstance(data, Mapping):
                title = data.get("title")
                if isinstance(title, str) and title.strip():
                    return " ".join(title.split())  # one line: a title must not break layout
        return "untitled"
