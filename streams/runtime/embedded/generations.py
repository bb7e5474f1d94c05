"""Embedded runtime, index lifecycle: numbered index generations and an fsynced CURRENT pointer.

A reindex builds `gen-<n+1>/` beside the live `gen-<n>/` while queries keep reading the old one,
then swaps by atomically replacing CURRENT (write temp, fsync, rename, fsync the directory).
A build that is interrupted leaves BUILDING naming it; the next reindex resumes it (the shards'
tracking tables say how far each session got). Retired generations are deleted after the
retention window, so snapshot readers of the old one can finish.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING

from projections.codec import JSONDecodeError, dumps, loads
from projections.errors import IndexDamaged

if TYPE_CHECKING:
    from pathlib import Path

CURRENT = "CURRENT"
BUILDING = "BUILDING"
RETIRED = "RETIRED"
#: Prefix of a generation moved aside because it was damaged (kept for inspection).
DAMAGED_PREFIX = "damaged-"
_NAME = re.compile(r"gen-\d{6,}\Z")


def ensure_private_dir(path: Path) -> Path:
    from streams.core.store import ensure_private_dir as ensure  # (the log modules): writers only

    return ensure(path)


def _write_atomic(path: Path, data: bytes) -> None:
    from streams.core.atomic import replace_file  # (tempfile): writers only

    replace_file(path, data)


def _pointer(path: str | os.PathLike[str]) -> str | None:
    """A generation name read from a pointer file; IndexDamaged if it names no generation."""
    try:
        with open(path, "rb") as pointer:
            data = pointer.read()
    except FileNotFoundError:
        return None
    name = data.decode("utf-8", "replace").strip()
    if not _NAME.match(name):
        raise IndexDamaged(f"{path} does not name an index generation ({name[:40]!r})")
    return name


def live_generation(root: str | os.PathLike[str]) -> str | None:
    """The name CURRENT under `root` holds, or None if it is missing or damaged (reads only)."""
    try:
        return _pointer(os.path.join(root, CURRENT))
    except IndexDamaged:
        return None


class Generations:
    """The index generations under `<data_dir>/index`."""

    def __init__(self, root: Path) -> None:
        self.root = ensure_private_dir(root)

    def exists(self) -> bool:
        """True once the first generation has been created (CURRENT written)."""
        return (self.root / CURRENT).exists()

    def live_name(self) -> str | None:
        """The name CURRENT holds, or None if it is missing or damaged (never creates)."""
        return live_generation(self.root)

    def current(self) -> Path:
        """The live generation's directory (created as gen-000001 on first use: writer only)."""
        name = _pointer(self.root / CURRENT)
        if name is not None:
            return self.root / name
        first = "gen-000001"
        ensure_private_dir(self.root / first)
        _write_atomic(self.root / CURRENT, first.encode())
        return self.root / first

    def building(self) -> Path:
        """The generation being built: the interrupted one if any, else a new number."""
        marker = self.root / BUILDING
        try:
            name = _pointer(marker)
        except IndexDamaged:
            name = None  # a damaged marker only costs the resume: build a new generation
        if name is not None:
            if name != self.live_name():
                return ensure_private_dir(self.root / name)
            marker.unlink()  # a crash after the swap, before the marker was cleared
        numbers = [int(p.name.split("-")[1]) for p in self.root.glob("gen-*")
                   if p.is_dir() and _NAME.match(p.name)]
        name = f"gen-{max(numbers, default=0) + 1:06d}"
        path = ensure_private_dir(self.root / name)
        for stale in path.iterdir():  # a half-created directory from before the marker existed
            stale.unlink()
        _write_atomic(marker, name.encode())
        return path

    def discard(self, path: Path) -> None:
        """Drop an unusable build (e.g. a shard file a crash left half-written)."""
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        (self.root / BUILDING).unlink(missing_ok=True)

    def promote(self, path: Path) -> Path:
        """Make `path` the live generation; the old one is retired (deleted after retention)."""
        live = self.live_name()
        old = self.root / live if live is not None else path
        if old == path:
            _write_atomic(self.root / CURRENT, path.name.encode())
            (self.root / BUILDING).unlink(missing_ok=True)
            return old
        _write_atomic(self.root / CURRENT, path.name.encode())
        (self.root / BUILDING).unlink(missing_ok=True)
        retired = self._retired()
        retired[old.name] = time.time()
        _write_atomic(self.root / RETIRED, dumps(retired))
        return old

    def cleanup(self, retention_s: float, *, now: float | None = None) -> list[str]:
        """Delete retired generations older than the window; returns their names."""
        now = time.time() if now is None else now
        retired = self._retired()
        removed = [name for name, at in retired.items() if now - at >= retention_s]
        import shutil

        for name in removed:
            shutil.rmtree(self.root / name, ignore_errors=True)
            del retired[name]
        if removed:
            _write_atomic(self.root / RETIRED, dumps(retired))
        return removed

    def move_aside(self, path: Path) -> Path:
        """Rename a damaged generation out of the way (kept, never deleted automatically)."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.root / f"{DAMAGED_PREFIX}{path.name}-{stamp}"
        n = 1
        while target.exists():
            n += 1
            target = self.root / f"{DAMAGED_PREFIX}{path.name}-{stamp}-{n}"
        path.rename(target)
        retired = self._retired()
        if retired.pop(path.name, None) is not None:
            _write_atomic(self.root / RETIRED, dumps(retired))
        return target

    def damaged(self) -> list[str]:
        """Names of generations moved aside as damaged."""
        return sorted(p.name for p in self.root.glob(f"{DAMAGED_PREFIX}*"))

    def _retired(self) -> dict[str, float]:
        path = self.root / RETIRED
        try:
            value = loads(path.read_bytes()) if path.exists() else {}
            return {str(k): float(v) for k, v in value.items()} if isinstance(value, dict) else {}
        except (JSONDecodeError, TypeError, ValueError):
            return {}  # only costs the deletion of old generations; rewritten on next retire
