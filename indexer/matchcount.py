"""Storage and read side: the PROTOCOL §3.6 match count as an FTS5 auxiliary function, `recall_matches`,
and the two ways a floor pass (indexer/search.py) keeps a shard's best k hits without sorting
them all: `recall_floor` + `recall_floor_take` (a heap filled as the query walks its hits) and
`recall_top` (one call that walks the hits itself through xQueryPhrase: no per-hit VDBE row, but
a second lookup of the phrase, so it pays off only for many hits). `recall_scan(k, token, ...)`
gives recall_top's answer without FTS5's row iterator: it reads the phrase's doclists from the
table's one segment (after a merge) and walks them as plain varints; NULL where the table has
another shape (several segments), and then recall_top answers.

The count is the number of spans highlight() marks: the row's phrase instances in position
order, overlapping ones merged the way FTS5's highlight() merges them (an instance that starts at
or before the end of the open span extends it). `xInstCount` alone is not that count for
self-overlapping phrases ("a a" occurs twice in "a a a" but is highlighted once).

The compiled function (indexer/_matchcount.c) is used when it was built; otherwise the Python
one below, which counts identically (tests/indexer/test_matchcount.py) but holds the GIL per row.
"""

from __future__ import annotations

import heapq
import importlib.util
import struct
from collections.abc import Sequence
from typing import Any

import apsw

from indexer.locks import Lock
from indexer.schema import LENGTH_MASK, TOKENIZER

FUNCTION = "recall_matches"
FLOOR_FUNCTION = "recall_floor"
TOP_FUNCTION = "recall_top"
SCAN_FUNCTION = "recall_scan"
#: The largest k a floor pass may ask for (the compiled function's bound too).
MAX_FLOOR = 1 << 22
#: Versioned: a module built from an older _matchcount.c (without recall_floor/recall_top/
#: recall_scan) has no such entry point, so it is refused and the Python functions are used
#: instead of some of them.
_ENTRY_POINT = "sqlite3_matchcount_v3_init"


def count_spans(instances: Sequence[tuple[int, int]]) -> int:
    """Merged spans of `(offset, size)` phrase instances (highlight()'s rule), any order."""
    count = 0
    end = -1
    for offset, size in sorted(instances):
        last = offset + size - 1
        if count and offset <= end:
            end = max(end, last)
        else:
            count += 1
            end = last
    return count


def python_matches(api: apsw.FTS5ExtensionApi) -> int:
    """The match count of the current row (column 0), in Python."""
    phrases = api.phrases
    if len(phrases) == 1 and len(phrases[0]) == 1:
        return api.inst_count  # one single-token phrase: instances never overlap
    instances = [(offset, len(tokens)) for number, tokens in enumerate(phrases)
                 for offset in api.phrase_locations(number)[0]]
    return count_spans(instances)


class PythonFloor:
    """`recall_floor(fts, k, token)` and `recall_floor_take(token, n)` of one connection, in
    Python (indexer/_matchcount.c holds the same rule): while FTS5 walks a MATCH query's hits,
    keep the k best (count desc, length key asc) in a heap held by the query's auxiliary data
    and by this slot; `take` returns them best first, packed as (score, document id) with
    score = count << LENGTH_BITS | (LENGTH_MASK - length key)."""

    def __init__(self) -> None:
        self.token: int | None = None
        self.heap: list[tuple[int, int, int]] = []

    def floor(self, api: apsw.FTS5ExtensionApi, size: int, token: int) -> int:
        heap: list[tuple[int, int, int]] | None = api.aux_data
        if heap is None:
            if not 1 <= size <= MAX_FLOOR:
                raise ValueError("recall_floor: k out of range")
            heap = api.aux_data = []
            self.token, self.heap = token, heap
        count = python_matches(api)
        rowid = api.rowid
        # Larger is better: the count first, then the shorter length key.
        entry = (count * (LENGTH_MASK + 1) + (LENGTH_MASK - (rowid & LENGTH_MASK)), rowid, count)
        if len(heap) < size:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:
            heapq.heapreplace(heap, entry)
        return 0

    def take(self, token: int, hits: int) -> bytes:
        del hits  # (only orders the call after the walk)
        if self.token != token:
            return b""  # no hit: `floor` never ran for this token
        best = sorted(self.heap, key=lambda e: -e[0])
        self.token, self.heap = None, []
        return struct.pack(f"<{2 * len(best)}q", *(v for score, rowid, _ in best
                                                   for v in (score, rowid)))


def python_top(api: apsw.FTS5ExtensionApi, size: int) -> bytes:
    """`recall_top(fts, k)` in Python: the MATCH query's best k hits, walked in one call through
    `query_phrase` (the query is one phrase), packed like `PythonFloor.take`."""
    if api.phrase_count != 1:
        raise ValueError("recall_top: the query must be one phrase")
    if not 1 <= size <= MAX_FLOOR:
        raise ValueError("recall_top: k out of range")
    heap: list[tuple[int, int]] = []

    def visit(row: apsw.FTS5ExtensionApi, _: object) -> None:
        rowid = row.rowid
        entry = (python_matches(row) * (LENGTH_MASK + 1) + (LENGTH_MASK - (rowid & LENGTH_MASK)),
                 rowid)
        if len(heap) < size:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:
            heapq.heapreplace(heap, entry)

    api.query_phrase(0, visit, None)
    best = sorted(heap, key=lambda e: -e[0])
    return struct.pack(f"<{2 * len(best)}q", *(v for entry in best for v in entry))


_tokenizer_lock = Lock()
_tokenizer: Any = None


def query_tokens(query: str) -> tuple[str, ...]:
    """The tokens FTS5 makes of `query` as one phrase of events_fts (its tokenizer, query
    flag): what `recall_scan` looks up."""
    global _tokenizer
    with _tokenizer_lock:  # (one private connection, shared by the search lanes)
        if _tokenizer is None:
            name, *args = TOKENIZER.split()
            _tokenizer = apsw.Connection(":memory:").fts5_tokenizer(name, args)
        found = _tokenizer(query.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
    return tuple(str(token[2]) for token in found)


def python_scan(*_: object) -> None:
    """`recall_scan(k, token, ...)` and `recall_scan_pages(token, ...)` without the compiled
    reader: NULL, which tells the caller to ask `recall_top` (the compiled one reads the table's
    segment itself; indexer/_matchcount.c)."""
    return None


def compiled_path() -> str | None:
    """The built extension module holding the compiled function, if the build made one."""
    spec = importlib.util.find_spec("indexer._matchcount")
    return spec.origin if spec is not None and spec.origin else None


_COMPILED = compiled_path()
#: What the last `register` gave: "compiled", or "python" (no extension was built — no C
#: compiler or SQLite headers at install — or SQLite refused it). Shown by `recall index stats`.
_registered = "compiled" if _COMPILED is not None else "python"


def implementation() -> str:
    """Which match-count functions this process registers: "compiled" or "python"."""
    return _registered


def register(conn: apsw.Connection, *, compiled: bool = True) -> str:
    """Make `recall_matches(fts)`, `recall_floor(fts, k, token)`, `recall_floor_take(token, n)`
    and `recall_top(fts, k)` available on `conn`; returns which implementation they are."""
    global _registered
    if compiled and _COMPILED is not None:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(_COMPILED, _ENTRY_POINT)
            _registered = "compiled"
            return "compiled"
        except apsw.Error:
            pass  # e.g. a build against headers this SQLite refuses: fall back to Python
        finally:
            conn.enable_load_extension(False)
    if compiled:
        _registered = "python"
    conn.register_fts5_function(FUNCTION, python_matches)  # type: ignore[arg-type]
    conn.register_fts5_function(TOP_FUNCTION, python_top)  # type: ignore[arg-type]
    conn.create_scalar_function(SCAN_FUNCTION, python_scan, -1)
    conn.create_scalar_function(SCAN_FUNCTION + "_pages", python_scan, -1)
    slot = PythonFloor()
    conn.register_fts5_function(FLOOR_FUNCTION, slot.floor)  # type: ignore[arg-type]
    conn.create_scalar_function(FLOOR_FUNCTION + "_take", slot.take, 2)  # type: ignore[arg-type]
    return "python"
