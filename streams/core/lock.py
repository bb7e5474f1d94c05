"""Embedded runtime, write coordination: one writer per data dir, enforced by an OS lock.

Every command that changes the data dir (ingest, reference appends, reindex, replay, and a
watcher per batch) holds `<data_dir>/lock` through `filelock` (flock on POSIX): the kernel
releases it when the holder exits, however it exits, so a `kill -9` never leaves it stuck.
Readers never take it: the store is append-only and fsynced, the index is SQLite in WAL mode.

A second writer waits, says so once on stderr (who holds the lock, since when), and gives up
after `RECALL_LOCK_TIMEOUT_S` with RECALL_LOCK_TIMEOUT. Each holder, right after acquiring,
rewrites `<data_dir>/writer.epoch` with a fresh token (and who it is); a process that finds
anything but the token it wrote last knows someone else wrote meanwhile and must drop what it
cached (store states, registry, dead-letter keys, the open index generation). The token is
written before any other write, so even a writer killed mid-batch is noticed by the next one;
it is rewritten in place (a torn token also reads as "changed", the safe answer).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from projections.codec import dumps, loads
from projections.errors import LockTimeout

if TYPE_CHECKING:
    import filelock

LOCK_FILE = "lock"
EPOCH_FILE = "writer.epoch"

#: Called with one line of text when a writer starts waiting (the CLI prints it on stderr).
Notify = Callable[[str], None]


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class WriterLock:
    """The data dir's writer lock. Re-entrant in one process: nested `hold()`s share one lock,
    and only the outermost one waits, validates caches and releases."""

    def __init__(self, data_dir: Path, *, timeout_s: float, notify: Notify | None = None,
                 command: str | None = None) -> None:
        self.data_dir = data_dir
        self.timeout_s = timeout_s
        self.notify = notify or _stderr
        argv = [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]
        self.command = command or " ".join(argv)[:120]
        self._file_lock: filelock.FileLock | None = None
        self._depth = 0
        self._token: bytes | None = None

    @property
    def _lock(self) -> filelock.FileLock:
        # filelock loads when a lock is first taken: readers, which never take it, skip it.
        if self._file_lock is None:
            import filelock

            self._file_lock = filelock.FileLock(str(self.data_dir / LOCK_FILE), mode=0o600)
        return self._file_lock

    @property
    def held(self) -> bool:
        return self._depth > 0

    @contextmanager
    def hold(self, on_acquired: Callable[[bool], None] | None = None) -> Iterator[None]:
        """Hold the lock for the block, waiting up to the timeout. `on_acquired(changed)` runs
        once the outermost hold has the lock; `changed` says another process wrote since this
        one last held it (so caches must be dropped)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._acquire()
        self._depth = 1
        try:
            changed = self._renew_epoch()
            if on_acquired is not None:
                on_acquired(changed)
            yield
        finally:
            self._depth = 0
            self._lock.release(force=True)

    @contextmanager
    def try_hold(self, on_acquired: Callable[[bool], None] | None = None
                 ) -> Iterator[bool]:
        """Like `hold`, but never waits: yields False (lock not taken) if another process has it."""
        if self._depth:
            with self.hold(on_acquired):
                yield True
            return
        import filelock

        try:
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            yield False
            return
        self._depth = 1
        try:
            changed = self._renew_epoch()
            if on_acquired is not None:
                on_acquired(changed)
            yield True
        finally:
            self._depth = 0
            self._lock.release(force=True)

    def _acquire(self) -> None:
        import filelock

        try:
            self._lock.acquire(timeout=0)
            return
        except filelock.Timeout:
            pass
        started = time.monotonic()
        self.notify(f"recall: waiting for the writer lock on {self.data_dir} "
                    f"({self.describe_owner()}); giving up after {self.timeout_s:g} s "
                    "(RECALL_LOCK_TIMEOUT_S)")
        try:
            self._lock.acquire(timeout=self.timeout_s, poll_interval=0.05)
        except filelock.Timeout:
            waited = time.monotonic() - started
            raise LockTimeout(f"another process kept the writer lock on {self.data_dir} for "
                              f"{waited:.1f} s ({self.describe_owner()})") from None

    def describe_owner(self) -> str:
        """Who holds the lock, as its holder recorded it (best effort: it is only a hint)."""
        try:
            owner = loads((self.data_dir / EPOCH_FILE).read_bytes())
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(owner["since"])))
            return f"held by pid {int(owner['pid'])}, `{owner['command']}`, since {since}"
        except Exception:
            return "holder unknown"

    def _renew_epoch(self) -> bool:
        """Write a fresh epoch token (and who we are); True if what was there is not what this
        process wrote last (another writer came in between, or this is our first hold)."""
        path = self.data_dir / EPOCH_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            previous = os.read(fd, 4096)
            changed = self._token is None or previous != self._token
            self._token = dumps({"token": secrets.token_hex(16), "pid": os.getpid(),
                                 "command": self.command, "since": time.time()})
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, self._token)
        finally:
            os.close(fd)
        return changed
