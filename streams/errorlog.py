"""Entry points, last resort: unexpected exceptions are written with their traceback to a log
file (never to the terminal), so a bug report has the details and the user sees one line.

The file is `<data_dir>/log/recall.log`, or `$XDG_STATE_HOME/session-recall/recall.log` when the
data dir is unusable; it is owner-only and rotated at 1 MiB (one old copy is kept).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

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
