"""Embedded runtime, small files: replaced atomically, never seen half-written.

A reader sees either the old or the new content: the new bytes go to a temporary file with a
unique name in the same directory (so two processes never share one temp file), are fsynced, then
renamed over the target; the directory is fsynced so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o600


def replace_file(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Atomically make `path` hold `data` (owner-only). `durable=False` skips the fsyncs, for
    hints whose loss in a power cut costs nothing (e.g. the writer epoch)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        sync_dir(path.parent)


def sync_dir(path: Path) -> None:
    """fsync a directory, so renames and creations in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
