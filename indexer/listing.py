"""Storage and read side: the session listing — every session with its title, agent, event count
and activity — and the titles Claude Code summaries give sessions across shards.

A listing record is PROTOCOL §3.1's `{header, live, persisted}` plus `title`, `titleSource`
(`agent`: a `session/title` of the session; `summary`: a Claude Code summary kept in another
session's log whose leaf is a record of this one; `prompt`: the person's first prompt,
shortened; null: none of these), `agent`, `eventCount`, `firstEventTime` and `lastEventTime`.

Summary titles are the one fact that crosses shards: the summary lives with the session whose
log holds it, the leaf with the session it names. Each shard answers its summaries (with its
generation) and which of some leaf keys are records of its sessions; `SummaryTitles` joins the
two, and recomputes only when a shard's generation moved. The embedded query service asks its
own shards, a Kafka coordinator scatters the same two questions to the shard owners, so both
runtimes answer the same records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from indexer.database import Conn
from indexer.errors import INVALID_FILTER, INVALID_LIMIT, query_error
from indexer.locks import Lock
from indexer.shard import Shard
from projections.codec import dumps, loads
from projections.titles import CLAUDE_AGENT, agent_of

#: What one shard says about each of its sessions (a listing row).
#: The columns of a listing row over a session row `s`, in `row_of`'s order (search reads them
#: with its hits: indexer/search.py).
ROW_COLUMNS = ("s.header, s.last_event_time, s.agent, s.title, s.prompt, s.event_count,"
               " s.first_event_time")
_ROW = f"SELECT {ROW_COLUMNS} FROM sessions s WHERE s.header IS NOT NULL"

Row = dict[str, Any]
#: Leaf keys → `[[key, sessionId, seq], …]` of the sessions holding them, over every shard.
Lookup = Callable[[list[int]], Sequence[Sequence[Sequence[Any]]]]


#: `sort_listing`'s order in SQL (ids compare as `str` does: UTF-8 bytes keep code point order).
LISTING_ORDER = " ORDER BY COALESCE(s.created_at, 0) DESC, s.id"


def shard_rows(conn: Conn, where: str = "", params: Sequence[Any] = (),
               limit: int | None = None) -> list[Row]:
    """Listing rows of one shard's sessions (optionally filtered by SQL over `s`); with `limit`,
    only the first `limit` in listing order, so only those headers are decoded."""
    sql = _ROW + (f" AND {where}" if where else "")
    args = list(params)
    if limit is not None:
        sql += LISTING_ORDER + " LIMIT ?"
        args.append(limit)
    return [row_of(values) for values in conn.execute(sql, args)]


def row_of(values: Sequence[Any]) -> Row:
    """The listing row of ROW_COLUMNS' values."""
    h, t, a, title, prompt, n, first = values
    return {"header": loads(h), "lastEventTime": t, "agent": a, "title": title,
            "prompt": prompt, "eventCount": n, "firstEventTime": first}


def rows_by_id(conn: Conn, ids: Iterable[str]) -> dict[str, Row]:
    """Listing rows of some of this shard's sessions, by id."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = shard_rows(conn, "s.id IN (SELECT value FROM json_each(?))",
                      [dumps(wanted).decode()])
    return {str(r["header"]["id"]): r for r in rows}


def answer_shard_summaries(shard: Shard, known: str | None) -> dict[str, Any]:
    """Owner side: `{generation, summaries?}`: this shard's summaries `[leaf key, title, time,
    session id, seq]`, left out when the asker already holds this generation's."""
    with shard.reader() as conn:
        conn.execute("BEGIN")
        try:
            meta = shard.meta(conn)
            generation = f"{meta.epoch}:{meta.generation}"
            if generation == known:
                return {"generation": generation}
            rows = conn.execute("SELECT leaf, title, time, session, seq FROM summaries"
                                " ORDER BY leaf").fetchall()
        finally:
            conn.execute("COMMIT")
    return {"generation": generation, "summaries": [list(r) for r in rows]}


def answer_shard_leaves(shard: Shard, keys: Sequence[int]) -> list[list[Any]]:
    """Owner side: `[key, session id, seq]` for each leaf key that is a record of a session of
    this shard (`seq`: the latest event carrying it)."""
    if not keys:
        return []
    with shard.reader() as conn:
        # Probe the primary key once per asked key (CROSS JOIN keeps that order of loops).
        rows = conn.execute(
            "SELECT u.key, s.id, u.seq FROM json_each(?) j CROSS JOIN uuids u ON u.key = j.value"
            " JOIN sessions s ON s.no = u.session WHERE s.header IS NOT NULL"
            " ORDER BY u.key, s.id", (dumps(sorted(set(keys))).decode(),)).fetchall()
    return [list(r) for r in rows]


def resolve_summaries(summaries: Iterable[Sequence[Any]],
                      leaves: Iterable[Sequence[Any]]) -> dict[str, str]:
    """Session id → summary title. Per leaf the latest summary (time, session id, seq) counts;
    per session, the summary of its latest leaf (the leaf's seq), then the latest summary."""
    by_leaf: dict[int, tuple[tuple[int, str, int], str]] = {}
    for leaf, title, time, session, seq in summaries:
        key = (int(time), str(session), int(seq))
        found = by_leaf.get(int(leaf))
        if found is None or key > found[0]:
            by_leaf[int(leaf)] = (key, str(title))
    best: dict[str, tuple[int, tuple[int, str, int], str]] = {}
    for leaf, session_id, seq in leaves:
        summary = by_leaf.get(int(leaf))
        if summary is None:
            continue
        rank = (int(seq), summary[0], summary[1])
        current = best.get(str(session_id))
        if current is None or rank > current:
            best[str(session_id)] = rank
    return {sid: title for sid, (_, _, title) in best.items()}


#: Ask every shard for its summaries given the generations already held (in shard order).
Ask = Callable[[list[str | None]], Sequence[Mapping[str, Any]]]


class SummaryTitles:
    """The summary titles of one index, recomputed only when a shard's generation moved."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._generations: list[str | None] = []
        self._summaries: list[list[list[Any]]] = []
        self._titles: dict[str, str] = {}

    def titles(self, shards: int, ask: Ask, lookup: Lookup) -> dict[str, str]:
        """Session id → summary title, asking the shards what changed since the last call."""
        with self._lock:
            if len(self._generations) != shards:
                self._generations = [None] * shards
                self._summaries = [[] for _ in range(shards)]
            answers = ask(list(self._generations))
            moved = False
            for k, answer in enumerate(answers):
                if "summaries" in answer:
                    self._summaries[k] = [list(s) for s in answer["summaries"]]
                    moved = True
                self._generations[k] = answer.get("generation")
            if moved:
                summaries = [s for part in self._summaries for s in part]
                keys = sorted({int(s[0]) for s in summaries})
                leaves = [leaf for part in lookup(keys) for leaf in part] if keys else []
                self._titles = resolve_summaries(summaries, leaves)
            return dict(self._titles)


def needs_summary(row: Mapping[str, Any]) -> bool:
    """Only a Claude Code session without a title of its own can take a summary's."""
    return row.get("title") is None and row.get("agent") == CLAUDE_AGENT


def describe(row: Mapping[str, Any], live: bool, summaries: Mapping[str, str]) -> dict[str, Any]:
    """The listing record of a shard row (module docstring)."""
    header = row["header"]
    session_id = str(header["id"])
    title, source = row.get("title"), "agent"
    if title is None and needs_summary(row) and session_id in summaries:
        title, source = summaries[session_id], "summary"
    if title is None and row.get("prompt") is not None:
        title, source = row["prompt"], "prompt"
    return {"header": header, "live": live, "persisted": True, "title": title,
            "titleSource": source if title is not None else None,
            "agent": row.get("agent") or agent_of(session_id),
            "eventCount": int(row.get("eventCount") or 0),
            "firstEventTime": row.get("firstEventTime"),
            "lastEventTime": row.get("lastEventTime")}


#: What a title search reads of each session: the title's parts and the listing order's key.
_TITLE_PARTS = ("SELECT s.id, s.title, s.prompt, s.agent, COALESCE(s.created_at, 0)"
                " FROM sessions s WHERE s.header IS NOT NULL")


def title_parts(conn: Conn, where: str = "", params: Sequence[Any] = ()) -> list[Row]:
    """The rows a title search needs (no header: `id`, `title`, `prompt`, `agent`, `createdAt`)
    of one shard's sessions (optionally filtered by SQL over `s`)."""
    sql = _TITLE_PARTS + (f" AND {where}" if where else "")
    return [{"id": i, "title": t, "prompt": p, "agent": a, "createdAt": c}
            for i, t, p, a, c in conn.execute(sql, list(params))]


def listing_title(row: Mapping[str, Any], summaries: Mapping[str, str]) -> str | None:
    """The title `describe` gives a row (`id` the session id)."""
    title = row.get("title")
    if title is None and needs_summary(row):
        title = summaries.get(str(row["id"]))
    return title if title is not None else row.get("prompt")


def sort_listing(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PROTOCOL §3.1 order: createdAt descending, then id ascending."""
    return sorted(items, key=lambda i: (-int(i["header"].get("createdAt") or 0),
                                        str(i["header"]["id"])))


def title_pattern(text: str) -> re.Pattern[str]:
    """A title search: literal, case-insensitive, whitespace-flexible (the `text` clause's
    rule, PROTOCOL §3.4)."""
    pieces = text.split()
    if not pieces:
        raise query_error(INVALID_FILTER, "a title search needs non-blank text")
    return re.compile(r"\s+".join(re.escape(p) for p in pieces), re.IGNORECASE)


def select_listing(records: list[dict[str, Any]], *, title: str | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Listing records whose title matches `title`, at most `limit` of them (in order)."""
    if title is not None:
        pattern = title_pattern(title)
        records = [r for r in records if r.get("title") and pattern.search(str(r["title"]))]
    checked = checked_limit(limit)
    return records if checked is None else records[:checked]


def checked_limit(limit: Any) -> int | None:
    """A listing limit: None (all of it) or a positive integer (INVALID_LIMIT otherwise)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise query_error(INVALID_LIMIT, "limit must be a positive integer")
    return limit
