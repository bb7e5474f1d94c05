"""Agent tools: workspace authorization (PROTOCOL §6.2) — who is calling, and what they may see.

Every decision reduces to one question asked the same way for a missing, a hidden and a
tampered session, so the three can never be told apart from the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.errors import SessionQueryError
from streams.facade import AMBIGUOUS_SHOWN, SESSION_NOT_FOUND, Recall, pick_sessions
from streams.faces.mcp.errors import (
    AMBIGUOUS_SESSION,
    MISSING_AGENT,
    TOOL_FAILED,
    ToolError,
    unauthorized,
)
from streams.faces.textsafe import visible

log = logging.getLogger("recall.mcp")


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

    def resolve(self, text: str) -> str:
        """The session of this workspace (or the caller itself) that `text` names: the full
        id, a unique prefix, or the id without its `agent:` prefix (`resolve_many`)."""
        return self.resolve_many([text])[0]

    def resolve_many(self, texts: list[str]) -> list[str]:
        """Resolve short ids with one listing. Only sessions the caller may see are
        candidates, so an id naming none of them is returned as it is and then fails the
        check every unknown id fails; several candidates are RECALL_AMBIGUOUS_SESSION, listing
        them (all of them are the caller's to see)."""
        short = sorted({t for t in texts if t and not self.is_self(t)})
        candidates: list[str] = [self.session_id]
        if short and self.cwd is not None:
            found = self.recall.filter_sessions([{"kind": "id-prefix", "values": short},
                                                 {"kind": "cwd", "values": [self.cwd]}])
            candidates += [str(r["header"]["id"]) for r in found
                           if self.header_ok(str(r["header"].get("id")), r["header"])]
        resolved: dict[str, str] = {}
        for text in short:
            named = [c for c in candidates if c.startswith(text)
                     or (":" in c and c.partition(":")[2].startswith(text))]
            picked = pick_sessions(text, named)
            if len(picked) > 1:
                shown = ", ".join(visible(p) for p in picked[:AMBIGUOUS_SHOWN])
                raise ToolError(AMBIGUOUS_SESSION, f"the session id {visible(text)} matches "
                                f"{len(picked)} sessions of this workspace: {shown}"
                                f"{' …' if len(picked) > AMBIGUOUS_SHOWN else ''}; give more "
                                "of it")
            resolved[text] = picked[0] if picked else text
        return [resolved.get(t, t) for t in texts]

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
        """The title of each id (the listing's: the agent's title, a Claude Code summary, else
        the person's first prompt), read once per call in one listing. A failed read renders
        as `untitled (title unavailable: CODE)`; an unauthorized observation fails the call."""
        wanted = [i for i in _dedupe(ids) if i not in self._titles]
        if not wanted:
            return self._titles
        try:
            found = self.recall.filter_sessions([{"kind": "id", "values": wanted}])
        except SessionQueryError as exc:
            log.warning("titles of sessions unavailable: %s", exc.code)
            self._titles.update({i: f"untitled (title unavailable: {exc.code})" for i in wanted})
            return self._titles
        except Exception as exc:
            log.warning("titles of sessions unavailable: %s", type(exc).__name__)
            self._titles.update({i: f"untitled (title unavailable: {TOOL_FAILED})"
                                 for i in wanted})
            return self._titles
        records = {str(r["header"].get("id")): r for r in found}
        for session_id in wanted:
            record = records.get(session_id)
            if record is None:
                log.warning("title of a session unavailable: %s", SESSION_NOT_FOUND)
                self._titles[session_id] = f"untitled (title unavailable: {SESSION_NOT_FOUND})"
                continue
            self.recheck(session_id, record.get("header"))
            title = record.get("title")
            # One line: a title must not break the layout.
            self._titles[session_id] = (" ".join(title.split())
                                        if isinstance(title, str) and title.strip()
                                        else "untitled")
        return self._titles

    def title(self, session_id: str) -> str:
        return self.titles([session_id])[session_id]
