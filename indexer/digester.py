"""Storage and read side: digest helpers — processes that digest shard files on the other cores.

The index digest re-folds every stored event (indexer/digest.py), pure Python bound to one core
by the GIL. A large index is digested by up to `HELPERS` helper processes instead, each a
`python -m indexer.digest_helper` started on first use and kept: it reads one JSON line per request
(a shard file's path), digests that file in a read-only snapshot of its own, and answers one
JSON line. A helper is a plain subprocess (fork + exec: safe from a process with threads, and
it never re-imports the caller's main module); it exits when its stdin closes, so it dies with
the process that started it, kill -9 included. A helper that fails or dies answers nothing: the
caller digests that shard itself, so an error (a damaged shard) surfaces exactly as it would
without helpers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from projections.codec import dumps, loads

#: Helper processes at most per process: one per core.
HELPERS = max(1, min(4, os.cpu_count() or 1))
_ROOT = str(Path(__file__).resolve().parent.parent)


class _Helper:
    """One helper process; used by one thread at a time."""

    def __init__(self) -> None:
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": _ROOT if not path else f"{_ROOT}{os.pathsep}{path}"}
        self.process = subprocess.Popen([sys.executable, "-m", "indexer.digest_helper"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, path: str) -> dict[str, list[Any]] | None:
        """The shard file's session digests, or None if the helper failed."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(dumps(path) + b"\n")
            stdin.flush()
            line = stdout.readline()
        except (OSError, ValueError):
            return None
        if not line:
            return None
        reply = loads(line)
        ok = reply.get("ok")
        return ok if isinstance(ok, dict) else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        if self.alive():
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


_slots = threading.BoundedSemaphore(HELPERS)
_idle: list[_Helper] = []
_lock = threading.Lock()


def _ask(path: str) -> dict[str, list[Any]] | None:
    with _slots:
        with _lock:
            helper = _idle.pop() if _idle else None
        if helper is None or not helper.alive():
            if helper is not None:
                helper.close()
            try:
                helper = _Helper()
            except OSError:
                return None
        result = helper.ask(path)
        if result is None:
            helper.close()  # a helper that failed once is not trusted with the next shard
        else:
            with _lock:
                _idle.append(helper)
        return result


def digest_files(paths: Sequence[str]) -> list[dict[str, list[Any]] | None]:
    """Each shard file's `{sessionId: [digest, events]}` from the helpers (None where a helper
    failed), the files spread over the helpers."""
    if len(paths) <= 1:
        return [_ask(p) for p in paths]
    with ThreadPoolExecutor(min(len(paths), HELPERS), thread_name_prefix="recall-digest") as ex:
        return list(ex.map(_ask, paths))


@atexit.register
def close_helpers() -> None:
    """Stop the idle helpers (a busy one stops when its caller's process exits)."""
    with _lock:
        helpers, _idle[:] = list(_idle), []
    for helper in helpers:
        helper.close()
