"""Storage and read side: the PROTOCOL §3.6 match count as an FTS5 auxiliary function, `recall_matches`.

The count is the number of spans highlight() marks: the row's phrase instances in position
order, overlapping ones merged the way FTS5's highlight() merges them (an instance that starts at
or before the end of the open span extends it). `xInstCount` alone is not that count for
self-overlapping phrases ("a a" occurs twice in "a a a" but is highlighted once).

The compiled function (indexer/_matchcount.c) is used when it was built; otherwise the Python
one below, which counts identically (tests/indexer/test_matchcount.py) but holds the GIL per row.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

import apsw

FUNCTION = "recall_matches"
_ENTRY_POINT = "sqlite3_matchcount_init"


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


def compiled_path() -> str | None:
    """The built extension module holding the compiled function, if the build made one."""
    spec = importlib.util.find_spec("indexer._matchcount")
    return spec.origin if spec is not None and spec.origin else None


_COMPILED = compiled_path()


def register(conn: apsw.Connection, *, compiled: bool = True) -> str:
    """Make `recall_matches(fts)` available on `conn`; returns which implementation it is."""
    if compiled and _COMPILED is not None:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(_COMPILED, _ENTRY_POINT)
            return "compiled"
        except apsw.Error:
            pass  # e.g. a build against headers this SQLite refuses: fall back to Python
        finally:
            conn.enable_load_extension(False)
    conn.register_fts5_function(FUNCTION, python_matches)  # type: ignore[arg-type]
    return "python"
