"""Storage and read side: one page of a session's human transcript (the UI's session page), found
from the stored rows instead of the whole log.

The transcript (streams/faces/ui/pages.py `transcript`) has one entry per event, except events
that carry nothing to show: a log-only event without text or a compaction marker's type, and an
assistant message with no words of its own whose calls all have tool/call events (shown through
those), unless it is shadowed. Which events those are, every event's surface, and which tool/call
names a call are all in the index (the events rows, the `calls` table); so the entry counts come
from aggregates, a page's events from a bounded range, and only the page's events (plus the
events that replaced them and the tool/calls they name) are read and decoded.

What replaced a shadowed event follows from the order keys: the surface is ordered by them (each
unique on it), and a replacement of the span start..end removes exactly the surface events whose
order key lies between those of start and end; so the first replacement after an event whose
span covers the event's order key is the one that shadowed it."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from indexer.blocks import read_raws
from indexer.database import Conn
from indexer.schema import CURRENT, SURFACE_CODES, SURFACE_NAMES
from projections.calls import call_ids, call_name, result_call_id
from projections.codec import dumps, loads

#: Types whose events are entries even without text (pages.py shows them as markers).
MARKER_TYPES = ("compaction/start", "compaction/summary", "compaction/end", "compaction/prune")
LOG_ONLY = SURFACE_CODES["log-only"]
#: Replacement events read at a time while looking for what shadowed a page's events: a few
#: first (the next replacement usually shadowed them all), more each time up to the last size.
_REPLACEMENT_CHUNKS = (4, 16, 64)


class SessionRows:
    """A session's extents: (session, seq) ⇄ event id without a query per event."""

    def __init__(self, conn: Conn, number: int) -> None:
        self.conn = conn
        self.number = number
        self.extents = [(int(s), int(f), int(n)) for s, f, n in conn.execute(
            "SELECT seq, first, size FROM extents WHERE session = ? ORDER BY seq", (number,))]
        self.starts = [e[0] for e in self.extents]
        codes = conn.execute(
            "SELECT code FROM types WHERE name IN (SELECT value FROM json_each(?))",
            (dumps(MARKER_TYPES),)).fetchall()
        markers = ", ".join(str(int(c)) for (c,) in codes) or "-1"
        #: an events row `e` that is a transcript entry unless its message is left out
        self.entry = f"(e.kind & 3 != {LOG_ONLY} OR e.len > 0 OR e.kind >> 6 IN ({markers}))"

    def id_of(self, seq: int) -> int | None:
        at = bisect.bisect_right(self.starts, seq) - 1
        if at < 0:
            return None
        start, first, size = self.extents[at]
        return first + seq - start if seq < start + size else None

    def rows(self, where: str, params: Iterable[Any], *, limit: int = -1,
             offset: int = 0) -> list[tuple[int, int, int | None]]:
        """(seq, kind, order key) of the session's events matching `where`, in seq order."""
        return [(int(s), int(k), None if o is None else int(o)) for s, k, o in self.conn.execute(
            "SELECT x.seq + e.id - x.first, e.kind, e.order_key FROM extents x"
            " JOIN events e ON e.id BETWEEN x.first AND x.first + x.size - 1"
            f" WHERE x.session = ? AND {where} ORDER BY x.seq, e.id LIMIT ? OFFSET ?",
            (self.number, *params, limit, offset))]

    def kinds(self, seqs: Iterable[int]) -> dict[int, tuple[int, int | None]]:
        """seq → (kind, order key) of the given events (absent ones left out)."""
        ids = {eid: seq for seq in seqs if (eid := self.id_of(seq)) is not None}
        return {ids[int(i)]: (int(k), None if o is None else int(o)) for i, k, o in
                self.conn.execute("SELECT id, kind, order_key FROM events"
                                  " WHERE id IN (SELECT value FROM json_each(?))",
                                  (dumps(list(ids)),))}


def _left_out(s: SessionRows) -> set[int]:
    """The assistant messages the transcript leaves out: no words of their own, every call named
    by a tool/call event, and on the current surface."""
    found = [int(seq) for (seq,) in s.conn.execute(
        "SELECT u.seq FROM calls u WHERE u.session = ? AND u.uses = 1 GROUP BY u.seq"
        " HAVING min(EXISTS(SELECT 1 FROM calls d WHERE d.session = u.session"
        " AND d.call = u.call AND d.uses = 0))", (s.number,))]
    return {seq for seq, (kind, _) in s.kinds(found).items() if kind & 3 == CURRENT}


def _counts(s: SessionRows, left_out: set[int]) -> dict[str, int]:
    counts = dict.fromkeys(("current", "shadowed", "log-only"), 0)
    for code, n in s.conn.execute(
            "SELECT e.kind & 3, count(*) FROM extents x"
            " JOIN events e ON e.id BETWEEN x.first AND x.first + x.size - 1"
            f" WHERE x.session = ? AND {s.entry} GROUP BY 1", (s.number,)):
        counts[SURFACE_NAMES[int(code)]] += int(n)
    counts["current"] -= len(left_out)
    return counts


def _entries_before(s: SessionRows, seq: int, left_out: set[int]) -> int:
    (candidates,) = s.conn.execute(
        "SELECT count(*) FROM extents x"
        " JOIN events e ON e.id BETWEEN x.first AND x.first + x.size - 1"
        f" WHERE x.session = ? AND {s.entry} AND x.seq + e.id - x.first < ?",
        (s.number, seq)).fetchone()
    return int(candidates) - sum(1 for o in left_out if o < seq)


def _page_rows(s: SessionRows, first: int, size: int,
               left_out: set[int]) -> list[tuple[int, int, int | None]]:
    """The rows of entries first .. first + size - 1 (in transcript order)."""
    offset = first
    while True:
        # entries before the candidate at `offset` = offset - the left-out candidates before it;
        # that count grows by at most one per candidate, so jumping by the shortfall never
        # overshoots the first candidate with `first` entries before it
        found = s.rows(s.entry, (), limit=1, offset=offset)
        if not found:
            return []
        seq = found[0][0]
        before = offset - sum(1 for o in left_out if o < seq)
        if before < first:
            offset += first - before
        elif seq in left_out:
            offset += 1
        else:
            break
    ahead = sum(1 for o in left_out if o >= seq)
    rows = [r for r in s.rows(s.entry, (), limit=size + ahead, offset=offset)
            if r[0] not in left_out]
    return rows[:size]


class Replacement(NamedTuple):
    """A stored replacement event: its seq, the order keys of its span's start and end (every
    surface event between them, inclusive, is what it shadowed), and its raw event."""

    seq: int
    start_key: int
    end_key: int
    raw: bytes


def replacements_after(s: SessionRows, epoch: str, after: int,
                       until: int | None = None) -> Iterator[Replacement]:
    """The session's replacement events with after < seq (< until), in seq order, read a few at
    a time (callers usually stop at one of the first)."""
    rounds = 0
    while True:
        limit = _REPLACEMENT_CHUNKS[min(rounds, len(_REPLACEMENT_CHUNKS) - 1)]
        rounds += 1
        bound = "" if until is None else f" AND x.seq + e.id - x.first < {int(until)}"
        chunk = s.rows("e.order_key IS NOT NULL AND e.order_key != x.seq + e.id - x.first"
                       f" AND x.seq + e.id - x.first > ?{bound}", (after,), limit=limit)
        if not chunk:
            return
        got = read_raws(s.conn, epoch, ((s.number, seq) for seq, _, _ in chunk))
        ends: dict[int, int] = {}
        for seq, _, _ in chunk:
            op = loads(got[(s.number, seq)]).get("surfaceOp")
            end = op.get("end") if isinstance(op, dict) else None
            if isinstance(end, int) and not isinstance(end, bool):
                ends[seq] = end
        end_rows = s.kinds(ends.values())
        for seq, _, start_key in chunk:
            end_row = end_rows.get(ends[seq]) if seq in ends else None
            if start_key is not None and end_row is not None and end_row[1] is not None:
                yield Replacement(seq, start_key, end_row[1], got[(s.number, seq)])
        after = chunk[-1][0]


def _replacers(s: SessionRows, epoch: str, shadowed: dict[int, int | None]
               ) -> tuple[dict[int, int], dict[int, bytes]]:
    """(shadowed seq → the replacement that shadowed it, replacement seq → its raw event) for
    the given shadowed events (seq → order key)."""
    found: dict[int, int] = {}
    raws: dict[int, bytes] = {}
    waiting = {seq: key for seq, key in shadowed.items() if key is not None}
    if not waiting:
        return found, raws
    for r in replacements_after(s, epoch, min(waiting)):
        hit = [t for t, key in waiting.items() if t < r.seq and r.start_key <= key <= r.end_key]
        for t in hit:
            found[t] = r.seq
            del waiting[t]
        if hit:
            raws[r.seq] = r.raw
        if not waiting:
            break
    return found, raws


def _names(s: SessionRows, epoch: str, calls: set[str]) -> dict[str, str]:
    """Call id → tool name, for the given calls that a tool/call names (the latest one's)."""
    if not calls:
        return {}
    last = {str(c): int(seq) for c, seq in s.conn.execute(
        "SELECT call, max(seq) FROM calls WHERE session = ? AND uses = 0"
        " AND call IN (SELECT value FROM json_each(?)) GROUP BY call",
        (s.number, dumps(sorted(calls))))}
    raws = read_raws(s.conn, epoch, ((s.number, seq) for seq in last.values()))
    return {c: call_name(loads(raws[(s.number, seq)])) for c, seq in last.items()}


def transcript_page(conn: Conn, epoch: str, number: int, header: Mapping[str, Any], *,
                    page: int, at: int | None, size: int) -> dict[str, Any]:
    """`{session, total, counts, page, pages, first, entries: [{event, surface, replacedBy}],
    replacers: [event], names: {callId: toolName}}`: the transcript page `page` (clamped to the
    last), or with `at` the page holding the first entry at or after seq `at`; `first` is the
    index of the page's first entry. `replacers` are the events that replaced the page's
    shadowed events; `names` names the calls its events make or answer."""
    s = SessionRows(conn, number)
    left_out = _left_out(s)
    counts = _counts(s, left_out)
    total = sum(counts.values())
    pages = max(1, -(-total // size))
    if at is not None:
        index = _entries_before(s, at, left_out)
        page = max(0, index if index < total else total - 1) // size + 1
    else:
        page = min(max(page, 1), pages)
    first = (page - 1) * size
    rows = _page_rows(s, first, size, left_out)
    raws = read_raws(conn, epoch, ((number, seq) for seq, _, _ in rows))
    events = [loads(raws[(number, seq)]) for seq, _, _ in rows]
    replaced_by, replacer_raws = _replacers(
        s, epoch, {seq: key for seq, kind, key in rows if SURFACE_NAMES[kind & 3] == "shadowed"})
    calls: set[str] = set()
    for event in events:
        kind = event.get("type")
        if kind == "assistant/message":
            calls.update(call_ids(event))
        elif kind == "tool/result":
            calls.add(result_call_id(event) or "")
    return {"session": dict(header), "total": total, "counts": counts, "page": page,
            "pages": pages, "first": first,
            "entries": [{"event": event, "surface": SURFACE_NAMES[kind & 3],
                         "replacedBy": replaced_by.get(seq)}
                        for event, (seq, kind, _) in zip(events, rows, strict=True)],
            "replacers": [loads(raw) for _, raw in sorted(replacer_raws.items())],
            "names": _names(s, epoch, calls)}
