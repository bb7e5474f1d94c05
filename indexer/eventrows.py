"""Storage and read side: one session's event rows in seq order, found through its extents."""

from __future__ import annotations

from dataclasses import dataclass

from indexer.database import Conn
from indexer.schema import SEQ_MASK, SURFACE_NAMES


@dataclass(frozen=True, slots=True)
class EventRow:
    """An events row with its seq and type name resolved."""

    id: int
    seq: int
    type: str
    time: int
    surface: str
    order_key: int | None
    length: int


def session_rows(conn: Conn, session_no: int, first_seq: int = 0, last_seq: int = SEQ_MASK, *,
                 current_only: bool = False) -> list[EventRow]:
    """The session's events with first_seq <= seq <= last_seq (only the current surface's if
    `current_only`), in seq order."""
    rows: list[EventRow] = []
    extents = conn.execute("SELECT seq, first, size FROM extents WHERE session = ? ORDER BY seq",
                           (session_no,)).fetchall()
    only = " AND kind & 3 = 0" if current_only else ""
    for start, first, size in extents:
        lo, hi = max(first_seq, start), min(last_seq, start + size - 1)
        if lo > hi:
            continue
        for eid, kind, time, order_key, length, name in conn.execute(
                "SELECT e.id, e.kind, e.time, e.order_key, e.len, t.name FROM events e"
                f" JOIN types t ON t.code = e.kind >> 3 WHERE e.id BETWEEN ? AND ?{only}"
                " ORDER BY e.id", (first + lo - start, first + hi - start)):
            rows.append(EventRow(int(eid), start + int(eid) - first, str(name), int(time),
                                 SURFACE_NAMES[int(kind) & 3],
                                 None if order_key is None else int(order_key), int(length)))
    return rows
