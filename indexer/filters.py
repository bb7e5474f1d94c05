"""Storage and read side: metadata filters (PROTOCOL §3.4) — validation, budgets, canonical form, SQL.

Beyond PROTOCOL §3.4 (extensions, docs/PROTOCOL.md §3.4): session kinds `cwd-tree` (a directory and
everything under it), `agent` (the agent that wrote the session) and `id-prefix` (ids starting
with the value, with or without their `agent:` prefix); event kind `source` (who wrote a user
message: `user`, `plugin`, `compaction` — a compact checkpoint —, `session-reference`; null
matches events that are not user messages; projections/titles.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from indexer.errors import INVALID_FILTER, query_error
from indexer.schema import SEQ, SOURCE, SURFACE, SURFACE_CODES, TYPE
from projections.codec import dumps
from projections.surfaces import SURFACE_VALUES
from projections.titles import NO_SOURCE, SOURCE_CODES

Scope = Literal["session", "event"]

SESSION_LIST_KINDS = {"id": "s.id", "cwd": "s.cwd", "parent": "s.parent", "agent": "s.agent",
                      "cwd-tree": "s.cwd", "id-prefix": "s.id"}
SESSION_RANGE_KINDS = {"created-at": "s.created_at"}
EVENT_LIST_KINDS = {"type": TYPE, "surface": SURFACE, "source": SOURCE}
EVENT_RANGE_KINDS = {"seq": SEQ, "time": "e.time"}
NULLABLE_KINDS = frozenset({"cwd", "parent", "source"})
#: Bindings one value of an extension kind takes (the others: one).
_BINDINGS_PER_VALUE = {"cwd-tree": 3, "id-prefix": 4}
#: Kinds whose values must be non-empty strings (an empty prefix or directory means nothing).
NON_EMPTY_KINDS = frozenset({"cwd-tree", "id-prefix"})
AVAILABILITY_VALUES = frozenset({"live", "persisted"})

MAX_PREDICATES_SESSIONS = 14
MAX_PREDICATES_EVENTS = 13
MAX_BINDINGS = 32_766
#: The reference implementation's fixed bindings per search statement (PROTOCOL §3.4).
FIXED_BINDINGS = 10


class ListClause(NamedTuple):
    kind: str
    values: tuple[str | None, ...]


class RangeClause(NamedTuple):
    kind: str
    start: int | float | None
    end: int | float | None


class TextClause(NamedTuple):
    pattern: re.Pattern[str]
    value: str


Clause = ListClause | RangeClause | TextClause


def _bad(message: str) -> Exception:
    return query_error(INVALID_FILTER, message)


def _endpoint(kind: str, clause: dict[str, Any], key: str) -> int | float | None:
    value = clause.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(f"{kind} filter {key} must be a finite number")
    return value


def _text_clause(clause: dict[str, Any]) -> TextClause:
    value = clause.get("value", clause.get("text"))
    if not isinstance(value, str) or not value.strip():
        raise _bad("text filter value must be a non-blank string")
    pieces = value.split()
    # Literal, whitespace-flexible, case-insensitive; diacritics deliberately not folded.
    pattern = re.compile(r"\s+".join(re.escape(p) for p in pieces), re.IGNORECASE | re.UNICODE)
    return TextClause(pattern, value.strip())


def validate_filters(filters: Any, scope: Scope, *, allow_text: bool = False) -> list[Clause]:
    """Copy and validate `filters` for `scope`; every failure is SESSION_QUERY_INVALID_FILTER."""
    if filters is None:
        return []
    if not isinstance(filters, list):
        raise _bad("filters must be an array")
    list_kinds = SESSION_LIST_KINDS if scope == "session" else EVENT_LIST_KINDS
    range_kinds = SESSION_RANGE_KINDS if scope == "session" else EVENT_RANGE_KINDS
    out: list[Clause] = []
    for clause in filters:
        if not isinstance(clause, dict) or not isinstance(clause.get("kind"), str):
            raise _bad("every filter must be an object with a string kind")
        kind = clause["kind"]
        if kind == "text" and scope == "event":
            if not allow_text:
                raise _bad("metadata filters do not accept text clauses")
            out.append(_text_clause(clause))
        elif kind in list_kinds or (scope == "session" and kind == "availability"):
            values = clause.get("values")
            if not isinstance(values, list):
                raise _bad(f"{kind} filter values must be an array")
            for v in values:
                if v is None and kind in NULLABLE_KINDS:
                    continue
                if not isinstance(v, str):
                    raise _bad(f"{kind} filter values must be strings")
                if kind == "availability" and v not in AVAILABILITY_VALUES:
                    raise _bad(f"availability accepts only live and persisted, got {v!r}")
                if kind == "surface" and v not in SURFACE_VALUES:
                    raise _bad(f"surface accepts only current, shadowed, log-only, got {v!r}")
                if kind == "source" and v not in SOURCE_CODES:
                    raise _bad("source accepts only user, plugin, compaction, "
                               f"session-reference and null, got {v!r}")
                if kind in NON_EMPTY_KINDS and not v:
                    raise _bad(f"{kind} filter values must be non-empty strings")
            out.append(ListClause(kind, tuple(values)))
        elif kind in range_kinds:
            start, end = _endpoint(kind, clause, "from"), _endpoint(kind, clause, "to")
            if start is not None and end is not None and start > end:
                raise _bad(f"{kind} filter from must not exceed to")
            out.append(RangeClause(kind, start, end))
        else:
            raise _bad(f"unknown {scope} filter kind {kind!r}")
    return out


def count_predicates(clauses: Sequence[Clause]) -> int:
    total = 0
    for c in clauses:
        if isinstance(c, ListClause):
            if c.kind == "availability" and c.values:
                total += 0 if set(c.values) == AVAILABILITY_VALUES else 1
            else:
                total += 1
        elif isinstance(c, RangeClause):
            total += (c.start is not None) + (c.end is not None)
    return total


def count_bindings(clauses: Sequence[Clause]) -> int:
    total = 0
    for c in clauses:
        if isinstance(c, ListClause):
            if c.kind == "availability":
                total += 1 if set(c.values) == {"live"} else 0
            else:
                total += _BINDINGS_PER_VALUE.get(c.kind, 1) * sum(v is not None for v in c.values)
        elif isinstance(c, RangeClause):
            total += (c.start is not None) + (c.end is not None)
    return total


def check_budgets(clauses: Sequence[Clause], *, within_session: bool) -> None:
    """Predicate and binding budgets (PROTOCOL §3.4), checked before any statement is prepared."""
    cap = MAX_PREDICATES_EVENTS if within_session else MAX_PREDICATES_SESSIONS
    predicates = count_predicates(clauses)
    if predicates > cap:
        raise _bad(f"filters compile to {predicates} predicates; the limit is {cap}")
    # Fixed bindings, limit+1, offset, and the target session id when within one session.
    bindings = FIXED_BINDINGS + 2 + (1 if within_session else 0) + count_bindings(clauses)
    if bindings > MAX_BINDINGS:
        raise _bad(f"filters need {bindings} bindings; the limit is {MAX_BINDINGS}")


def _sort_values(values: Sequence[str | None]) -> list[str | None]:
    nulls: list[str | None] = [v for v in values if v is None]
    return nulls + sorted(v for v in values if v is not None)


def canonical_filters(clauses: Sequence[Clause]) -> list[dict[str, Any]]:
    """Order-insensitive form for cursor fingerprints (PROTOCOL §3.9)."""
    canon: list[dict[str, Any]] = []
    for c in clauses:
        if isinstance(c, ListClause):
            canon.append({"kind": c.kind, "values": _sort_values(c.values)})
        elif isinstance(c, RangeClause):
            canon.append({"kind": c.kind, "from": c.start, "to": c.end})
        else:
            canon.append({"kind": "text", "value": c.value})
    return sorted(canon, key=lambda d: dumps(d))


def compile_clauses(clauses: Sequence[Clause], *, live_since: int) -> tuple[list[str], list[Any]]:
    """SQL predicates and bindings over aliases `s` (sessions) and `e` (events); text clauses are
    applied in Python by the caller. User values are only ever bound, never spliced."""
    sql: list[str] = []
    params: list[Any] = []
    columns = {**SESSION_LIST_KINDS, **SESSION_RANGE_KINDS, **EVENT_LIST_KINDS, **EVENT_RANGE_KINDS}
    for c in clauses:
        if isinstance(c, ListClause):
            if c.kind == "availability":
                wanted = set(c.values)
                if not wanted:
                    sql.append("0")
                elif wanted == {"live"}:
                    sql.append("s.last_event_time >= ?")
                    params.append(live_since)
                # Every stored session is persisted, so `persisted` (alone or with live) is TRUE.
                continue
            column = columns[c.kind]
            strings = [v for v in c.values if v is not None]
            parts: list[str] = []
            marks = ",".join("?" * len(strings))
            # Types and surfaces are stored as integer codes (indexer/schema.py).
            if strings and c.kind == "type":
                parts.append(f"{column} IN (SELECT code FROM types WHERE name IN ({marks}))")
                params.extend(strings)
            elif strings and c.kind == "surface":
                parts.append(f"{column} IN ({marks})")
                params.extend(SURFACE_CODES[v] for v in strings)
            elif strings and c.kind == "source":
                parts.append(f"{column} IN ({marks})")
                params.extend(SOURCE_CODES[v] for v in strings)
            elif strings and c.kind == "cwd-tree":
                for value in strings:
                    base, low, high = cwd_tree_bounds(value)
                    parts.append(f"{column} = ? OR ({column} >= ? AND {column} < ?)")
                    params.extend([base, low, high])
            elif strings and c.kind == "id-prefix":
                for value in strings:
                    # The whole id, or the id after its `agent:` prefix (a bare Claude UUID).
                    parts.append(f"substr({column}, 1, length(?)) = ? OR substr({column},"
                                 f" instr({column}, ':') + 1, length(?)) = ?")
                    params.extend([value] * 4)
            elif strings:
                parts.append(f"{column} IN ({marks})")
                params.extend(strings)
            if len(strings) != len(c.values):
                parts.append(f"{column} = {NO_SOURCE}" if c.kind == "source"
                             else f"{column} IS NULL")
            sql.append("(" + " OR ".join(parts) + ")" if parts else "0")
        elif isinstance(c, RangeClause):
            column = columns[c.kind]
            if c.start is not None:
                sql.append(f"{column} >= ?")
                params.append(c.start)
            if c.end is not None:
                sql.append(f"{column} <= ?")
                params.append(c.end)
    return sql, params


def cwd_tree_bounds(value: str) -> tuple[str, str, str]:
    """(directory, low, high) for `cwd-tree`: the directory itself (trailing separators
    dropped), and the range [dir + sep, dir + next(sep)) holding every path below it. The
    separator is `\\` for a Windows path without `/`, else `/`."""
    sep = "\\" if "\\" in value and "/" not in value else "/"
    base = value.rstrip(sep)
    if not base:  # the root: every absolute path
        return sep, sep, chr(ord(sep) + 1)
    return base, base + sep, base + chr(ord(sep) + 1)


def text_clauses(clauses: Sequence[Clause]) -> list[TextClause]:
    return [c for c in clauses if isinstance(c, TextClause)]
