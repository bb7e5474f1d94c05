"""Ingest edge: times from a source file's own metadata, for formats that record none."""

from __future__ import annotations

import os


def modified_ms(source_name: str) -> int | None:
    """The file's modification time (epoch ms), or None when the name is not a readable file
    (an importer called on bytes alone dates nothing)."""
    try:
        return os.stat(source_name).st_mtime_ns // 1_000_000
    except (OSError, ValueError):
        return None
