"""Embedded runtime, index lifecycle: numbered index generations and an fsynced CURRENT pointer.

A reindex builds `gen-<n+1>/` beside the live `gen-<n>/` while queries keep reading the old one,
then swaps by atomically replacing CURRENT (write temp, fsync, rename, fsync the directory).
A build that is interrupted leaves BUILDING naming it; the next reindex resumes it (the shards'
tracking tables say how far each session got). Retired generations are deleted after the
retention window, so snapshot readers of the old one can finish.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import orjson

from streams.store import ensure_private_dir, open_private

CURRENT = "CURRENT"
BUILDING = "BUILDING"
RETIRED = "RETIRED"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open_private(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Generations:
    """The index generations under `<data_dir>/index`."""

    def __init__(self, root: Path) -> None:
        self.root = ensure_private_dir(root)

    def current(self) -> Path:
        """The live generation's directory (created as gen-000001 on first use)."""
        pointer = self.root / CURRENT
        if pointer.exists():
            return self.root / pointer.read_text().strip()
        first = "gen-000001"
        ensure_private_dir(self.root / first)
        _write_atomic(pointer, first.encode())
        return self.root / first

    def building(self) -> Path:
        """The generation being built: the interrupted one if any, else a new number."""
        marker = self.root / BUILDING
        if marker.exists():
            name = marker.read_text().strip()
            if name != self.current().name:
                return ensure_private_dir(self.root / name)
            marker.unlink()  # a crash after the swap, before the marker was cleared
        numbers = [int(p.name.split("-")[1]) for p in self.root.glob("gen-*") if p.is_dir()]
        name = f"gen-{max(numbers, default=0) + 1:06d}"
        path = ensure_private_dir(self.root / name)
        for stale in path.iterdir():  # a half-created directory from before the marker existed
            stale.unlink()
        _write_atomic(marker, name.encode())
        return path

    def discard(self, path: Path) -> None:
        """Drop an unusable build (e.g. a shard file a crash left half-written)."""
        shutil.rmtree(path, ignore_errors=True)
        (self.root / BUILDING).unlink(missing_ok=True)

    def promote(self, path: Path) -> Path:
        """Make `path` the live generation; the old one is retired (deleted after retention)."""
        old = self.current()
        if old == path:
            (self.root / BUILDING).unlink(missing_ok=True)
            return old
        _write_atomic(self.root / CURRENT, path.name.encode())
        (self.root / BUILDING).unlink(missing_ok=True)
        retired = self._retired()
        retired[old.name] = time.time()
        _write_atomic(self.root / RETIRED, orjson.dumps(retired))
        return old

    def cleanup(self, retention_s: float, *, now: float | None = None) -> list[str]:
        """Delete retired generations older than the window; returns their names."""
        now = time.time() if now is None else now
        retired = self._retired()
        removed = [name for name, at in retired.items() if now - at >= retention_s]
        for name in removed:
            shutil.rmtree(self.root / name, ignore_errors=True)
            del retired[name]
        if removed:
            _write_atomic(self.root / RETIRED, orjson.dumps(retired))
        return removed

    def _retired(self) -> dict[str, float]:
        path = self.root / RETIRED
        return dict(orjson.loads(path.read_bytes())) if path.exists() else {}
