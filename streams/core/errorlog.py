"""Entry points, last resort: any exception → one coded RecallError (`as_recall_error`), with the
traceback of anything unexpected written to a log file (never to the terminal), so a bug report
has the details and the user sees one line. Every edge (CLI, a reply to a request) maps through
this one function.

The file is `<data_dir>/log/recall.log`, or `$XDG_STATE_HOME/session-recall/recall.log` when the
data dir is unusable; it is owner-only and rotated at 1 MiB (one old copy is kept).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
import traceback
from pathlib import Path

from projections.errors import RECALL_IO_ERROR, IndexDamaged, InternalError, RecallError

MAX_BYTES = 1 << 20


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "session-recall"


def log_exception(exc: BaseException, data_dir: Path | None, *, context: str = "") -> Path | None:
    """Append `exc` with its traceback; returns the log's path, or None if no place took it."""
    text = "".join(traceback.format_exception(exc))
    argv = " ".join(repr(a) for a in sys.argv)
    entry = (f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} pid {os.getpid()} {context}\n"
             f"argv: {argv}\n{text}\n")
    candidates = [data_dir / "log"] if data_dir is not None else []
    candidates.append(state_dir())
    for directory in candidates:
        with contextlib.suppress(OSError):
            if directory.exists() and not directory.is_dir():
                continue
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = directory / "recall.log"
            if path.exists() and path.stat().st_size > MAX_BYTES:
                os.replace(path, path.with_name("recall.log.1"))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(entry)
            return path
    return None


def as_recall_error(exc: BaseException, data_dir: Path | None) -> RecallError:
    """The one mapping from any exception to a coded error. RecallErrors pass through; SQLite
    damage is RECALL_INDEX_DAMAGED, OS refusals RECALL_IO_ERROR, anything else
    RECALL_INTERNAL_ERROR; all but the first are logged with their traceback."""
    if isinstance(exc, RecallError):
        return exc
    if isinstance(exc, sqlite3.DatabaseError):
        where = log_exception(exc, data_dir, context="index error")
        return IndexDamaged(f"the index could not be read: {exc}"
                            + (f" (details in {where})" if where else ""))
    if isinstance(exc, OSError):
        where = log_exception(exc, data_dir, context="I/O error")
        name = exc.filename if isinstance(exc.filename, str) else ""
        return RecallError(f"{exc.strerror or type(exc).__name__}"
                           + (f": {name}" if name else "")
                           + (f" (details in {where})" if where else ""),
                           code=RECALL_IO_ERROR, hint="check the path, its permissions and free space")
    where = log_exception(exc, data_dir, context="unexpected exception")
    return InternalError(f"unexpected {type(exc).__name__}"
                         + (f"; the traceback is in {where}" if where else
                            "; the traceback could not be logged"))
