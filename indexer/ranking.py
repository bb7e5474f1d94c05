"""Storage and read side: the exact ranking keys of SPEC 3.6 and the pure merge of shard results.

A candidate is plain JSON (`sessionId, seq, type, time, surface, length, matches, snippet`, plus
`header`/`lastEventTime` for session hits) so a remote shard owner can ship it unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

Candidate = dict[str, Any]
Scope = Literal["sessions", "events"]


def event_key(c: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """Match count desc, length asc (code points), time desc, seq desc."""
    return (-int(c["matches"]), int(c["length"]), -int(c["time"]), -int(c["seq"]))


def session_key(c: Mapping[str, Any]) -> tuple[int, int, int, str, int]:
    """The best event's key, with session id (code-point order) before seq."""
    return (-int(c["matches"]), int(c["length"]), -int(c["time"]), str(c["sessionId"]),
            -int(c["seq"]))


def rank(candidates: Iterable[Candidate], scope: Scope) -> list[Candidate]:
    return sorted(candidates, key=session_key if scope == "sessions" else event_key)


def best_per_session(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Each session's best event by `event_key` (a session lives in one shard, so this is exact)."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        sid = str(c["sessionId"])
        if sid not in best or event_key(c) < event_key(best[sid]):
            best[sid] = c
    return list(best.values())


def merge_page(shard_results: Iterable[list[Candidate]], scope: Scope, offset: int,
               limit: int) -> list[Candidate]:
    """Merge per-shard top lists into rows offset..offset+limit (limit+1 rows: one extra tells
    whether another page exists). Each shard must have returned its top offset+limit+1."""
    merged = rank((c for result in shard_results for c in result), scope)
    return merged[offset:offset + limit + 1]
