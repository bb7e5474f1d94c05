"""Storage and read side: the exact ranking keys of PROTOCOL §3.6 and the pure merge of shard results.

The rule is defined once, as the ordered fields below; the Python sort keys and the SQL ORDER BY
clauses are both derived from it (tests/properties/test_ranking_props.py checks SQLite sorts
random candidates exactly as `rank` does).

A candidate is plain JSON (`sessionId, seq, type, time, surface, length, matches, snippet`, plus
`header`/`lastEventTime` for session hits) so a remote shard owner can ship it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple

Candidate = dict[str, Any]
Scope = Literal["sessions", "events"]


class Field(NamedTuple):
    """One ranking field: the candidate key, the SQL column alias, and its direction."""

    key: str
    column: str
    descending: bool


#: Per event: match count desc, length asc (code points), time desc, seq desc.
EVENT_ORDER = (Field("matches", "mc", True), Field("length", "len", False),
               Field("time", "time", True), Field("seq", "seq", True))
#: Per session (its best event by EVENT_ORDER): the same, with session id (code-point order,
#: which is SQLite's BINARY order of UTF-8) before seq.
SESSION_ORDER = (*EVENT_ORDER[:3], Field("sessionId", "sid", False), EVENT_ORDER[3])


def order_by(order: tuple[Field, ...]) -> str:
    """The SQL ORDER BY list of `order` over the fields' column aliases."""
    return ", ".join(f"{f.column} {'DESC' if f.descending else 'ASC'}" for f in order)


def sort_key(order: tuple[Field, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The Python sort key of `order` (descending fields are integers, negated)."""
    fields = [(f.key, f.descending) for f in order]

    def key(c: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(-int(c[k]) if desc else (str(c[k]) if k == "sessionId" else int(c[k]))
                     for k, desc in fields)
    return key


def event_key(c: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """`sort_key(EVENT_ORDER)` spelled out (it runs per candidate; tests pin the two equal)."""
    return (-c["matches"], c["length"], -c["time"], -c["seq"])


def session_key(c: Mapping[str, Any]) -> tuple[int, int, int, str, int]:
    """`sort_key(SESSION_ORDER)` spelled out."""
    return (-c["matches"], c["length"], -c["time"], c["sessionId"], -c["seq"])


def rank(candidates: Iterable[Candidate], scope: Scope) -> list[Candidate]:
    return sorted(candidates, key=session_key if scope == "sessions" else event_key)


def best_per_session(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Each session's best event by `event_key` (a session lives in one shard, so this is exact)."""
    best: dict[str, Candidate] = {}
    keys: dict[str, tuple[Any, ...]] = {}
    for c in candidates:
        sid = str(c["sessionId"])
        k = event_key(c)
        if sid not in best or k < keys[sid]:
            best[sid] = c
            keys[sid] = k
    return list(best.values())


def merge_page(shard_results: Iterable[list[Candidate]], scope: Scope, offset: int,
               limit: int) -> list[Candidate]:
    """Merge per-shard top lists into rows offset..offset+limit (limit+1 rows: one extra tells
    whether another page exists). Each shard must have returned its top offset+limit+1."""
    merged = rank((c for result in shard_results for c in result), scope)
    return merged[offset:offset + limit + 1]
