"""Ingest edge: split one Claude Code file into sessions (main chain, each sidechain run) + headers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from streams.ingest.importers.common import SourceLine, iso_ms, make_header

MAIN = "main"
PREFIX = "claude-code"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


@dataclass(slots=True)
class Route:
    """The lines of one session, in file order, plus what its header is made of."""

    key: str
    lines: list[SourceLine] = field(default_factory=list)
    session_id: str | None = None
    created_at: int | None = None
    cwd: Any = None


def _sidechain_key(value: dict[str, Any], owner: dict[str, str]) -> str:
    """A sidechain record joins its parent's run; a run is named by agentId or its root uuid."""
    parent = value.get("parentUuid")
    if isinstance(parent, str) and owner.get(parent, MAIN) != MAIN:
        return owner[parent]
    agent = value.get("agentId")
    if isinstance(agent, str) and agent:
        return f"agent-{agent}"
    return f"agent-{value.get('uuid')}"


def route(lines: list[SourceLine]) -> tuple[list[Route], list[SourceLine]]:
    """Group lines by session. Records without a uuid (snapshots, queue ops, summaries) go to the
    main session once one exists, else to the session last seen; leading ones to the first.
    Also returns the lines no session claimed (a file that has no session record yet)."""
    routes: dict[str, Route] = {}
    owner: dict[str, str] = {}
    leading: list[SourceLine] = []
    last: str | None = None
    for line in lines:
        value = line.value
        uuid = value.get("uuid")
        if isinstance(uuid, str) and uuid:
            key = _sidechain_key(value, owner) if value.get("isSidechain") is True else MAIN
            owner[uuid] = key
        elif MAIN in routes or last is not None:
            key = MAIN if MAIN in routes else str(last)
        else:
            leading.append(line)
            continue
        target = routes.setdefault(key, Route(key))
        if leading:
            target.lines.extend(leading)
            leading = []
        target.lines.append(line)
        _observe(target, value)
        last = key
    return list(routes.values()), leading


def _observe(target: Route, value: dict[str, Any]) -> None:
    if target.session_id is None and isinstance(value.get("sessionId"), str):
        target.session_id = value["sessionId"]
    if target.created_at is None:
        target.created_at = iso_ms(value.get("timestamp"))
    if target.cwd is None and isinstance(value.get("cwd"), str):
        target.cwd = value["cwd"]


def main_id(routes: list[Route], source_name: str) -> str | None:
    """The file stem when it is a session uuid (resumed copies keep old ids on copied lines),
    else the main chain's own sessionId."""
    stem = PurePath(source_name).name.split(".", 1)[0]
    if _UUID.match(stem):
        return f"{PREFIX}:{stem}"
    for r in routes:
        if r.key == MAIN and r.session_id:
            return f"{PREFIX}:{r.session_id}"
    return None


def header_for(r: Route, main: str | None) -> dict[str, Any] | None:
    """The header of a routed session; None while it has no timestamp or session id yet."""
    if r.created_at is None:
        return None
    if r.key == MAIN:
        return make_header(main, r.created_at, cwd=r.cwd) if main else None
    if not r.session_id:
        return None
    parent = main or f"{PREFIX}:{r.session_id}"
    return make_header(f"{PREFIX}:{r.session_id}/{r.key}", r.created_at, cwd=r.cwd,
                       parent=parent, depth=1)
