"""Ingest edge, live: `recall watch` follows agents' log files as they grow and ingests their
complete new lines in small batches (embedded), or publishes them to the events topic (with
RECALL_BROKER: the fleet shipper, the Kafka ingest with its per-file record, streams/runtime/kafka/sent.py).

Order of a run: (1) take `<data_dir>/watch.lock` (a second watcher on the data dir is refused
with RECALL_WATCH_RUNNING); (2) catch up: every log file under the roots goes through the
incremental ingest, which resumes from the positions recorded in `sources.json` (unchanged
files cost a stat); (3) follow file-system notifications (watchfiles: inotify / FSEvents /
ReadDirectoryChangesW, never a polling loop of ours; the first wake-up after the watch starts
looks at every file again, for lines written between the catch-up and the start) and ingest the
changed files, at most
`BATCH_FILES` per batch, each batch under the data dir's writer lock (`ingest` takes it), so an
`ingest` or a reference append run meanwhile interleaves between batches instead of failing.
A partial last line stays pending until its newline arrives; a rewritten file is reported,
never merged (the ingest edge's rules). A batch that fails (the lock was held too long, a
vanished file) is reported and retried on the next tick. SIGINT/SIGTERM finish the current
batch and stop.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Protocol

import filelock
import watchfiles

from projections.codec import dumps, loads
from projections.errors import RecallError
from streams.core.errorlog import as_recall_error
from streams.core.store import ensure_private_dir
from streams.ingest.edge import LOG_SUFFIXES, IngestReport, iter_log_files
from streams.ingest.importers.detect import claims_log_name, default_locations, source_of

WATCH_LOCK = "watch.lock"
WATCH_OWNER = "watch.owner"
RECALL_WATCH_RUNNING = "RECALL_WATCH_RUNNING"
#: Files per batch: the writer lock is released between batches, so other writers interleave.
BATCH_FILES = 64
#: Wake-up period while idle (ms): missing roots are looked for and failed batches retried.
TICK_MS = 2_000


class WatcherRunning(RecallError):
    """Another `recall watch` already follows this data dir."""

    code = RECALL_WATCH_RUNNING
    hint = ("one watcher per data dir: stop the other one (its pid is in the message), or "
            "give this one another --data-dir")


class Sink(Protocol):
    """Where a batch goes: the embedded ingest, or the Kafka one (the fleet shipper)."""

    def ingest(self, paths: Sequence[Path]) -> IngestReport: ...


def is_log_file(path: str | PurePath) -> bool:
    """A file the ingest edge reads: native JSONL (zstd) or a name some agent writes (or a
    companion of one: a database's `-wal`)."""
    pure = PurePath(path)
    return pure.name.endswith(LOG_SUFFIXES) or claims_log_name(source_of(pure))


def default_roots(environ: Mapping[str, str] | None = None, *,
                  agents: Sequence[str] = ()) -> list[Path]:
    """`RECALL_WATCH_PATHS` (os.pathsep-separated) if set, else the default log folders of
    every supported agent (or of `agents`), from the importer registry."""
    environ = os.environ if environ is None else environ
    configured = environ.get("RECALL_WATCH_PATHS")
    if configured:
        return [Path(p).expanduser() for p in configured.split(os.pathsep) if p]
    roots: list[Path] = []
    for name, paths in default_locations(environ).items():
        if not agents or name in agents:
            roots.extend(p for p in paths if p not in roots)
    return roots


@contextmanager
def watch_lock(data_dir: Path) -> Iterator[None]:
    """Hold the data dir's watcher lock for the run; refuse at once if another watcher has it."""
    # filelock before 3.13 does not create the lock file's folder (a first run's data dir)
    ensure_private_dir(data_dir)
    lock = filelock.FileLock(str(data_dir / WATCH_LOCK), mode=0o600)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        try:
            owner = loads((data_dir / WATCH_OWNER).read_bytes())
            who = f"pid {int(owner['pid'])}, since {owner['since']}"
        except Exception:
            who = "holder unknown"
        raise WatcherRunning(f"another `recall watch` already follows {data_dir} ({who})") \
            from None
    try:
        owner_path = data_dir / WATCH_OWNER
        fd = os.open(owner_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(dumps({"pid": os.getpid(), "since": time.strftime(
                "%Y-%m-%dT%H:%M:%S%z")}))
        yield
    finally:
        lock.release(force=True)


@dataclass(slots=True)
class WatchStatus:
    """What the status line shows: files watched, events/s over the last 10 s, last error."""

    roots: list[str] = field(default_factory=list)
    files: int = 0
    events: int = 0
    batches: int = 0
    last_error: str | None = None
    recent: deque[tuple[float, int]] = field(default_factory=deque)

    def add(self, events: int, now: float) -> None:
        self.events += events
        self.batches += 1
        self.recent.append((now, events))

    def rate(self, now: float, window: float = 10.0) -> float:
        while self.recent and self.recent[0][0] < now - window:
            self.recent.popleft()
        return sum(n for _, n in self.recent) / window

    def line(self, now: float) -> str:
        error = f"; last error: {self.last_error}" if self.last_error else ""
        return (f"watching {self.files} files under {len(self.roots)} folders; "
                f"{self.rate(now):.1f} events/s; {self.events} events in {self.batches} "
                f"batches{error}")


Emit = Callable[[dict[str, Any]], None]


class Watcher:
    """Catch up, then follow notifications; every batch goes to the sink."""

    def __init__(self, sink: Sink, roots: Sequence[Path], emit: Emit, *,
                 debounce_ms: int = 200, step_ms: int = 25, tick_ms: int = TICK_MS) -> None:
        self.sink = sink
        self.roots = [Path(r).expanduser().absolute() for r in roots]
        self.emit = emit
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.tick_ms = tick_ms
        self.status = WatchStatus(roots=[str(r) for r in self.roots])
        self.stop = threading.Event()
        self._known: set[Path] = set()
        self._retry: set[Path] = set()

    # --- one batch ----------------------------------------------------------------------------

    def ingest(self, paths: Sequence[Path]) -> None:
        """Send the paths to the sink in batches of at most BATCH_FILES; failures are reported
        and the paths kept for the next tick."""
        todo = sorted(set(paths) | self._retry)
        self._retry.clear()
        for start in range(0, len(todo), BATCH_FILES):
            batch = [p for p in todo[start:start + BATCH_FILES] if p.exists()]
            if not batch:
                continue
            self._known.update(batch)
            self.status.files = len(self._known)
            try:
                report = self.sink.ingest(batch)
            except Exception as exc:  # never let one batch end the watcher
                error = as_recall_error(exc, None)
                self.status.last_error = f"{error.code}: {error.message}"
                self._retry.update(batch)
                self.emit({"event": "error", "code": error.code, "message": error.message,
                           "files": len(batch)})
                continue
            self._report(report)

    def _report(self, report: IngestReport) -> None:
        data = report.to_json()
        now = time.monotonic()
        self.status.add(int(data["eventsAdded"]), now)
        if data["eventsAdded"] or data["parkedLines"] or data["rewritten"] \
                or data["unreadable"]:
            self.emit({"event": "batch", "files": data["files"],
                       "eventsAdded": data["eventsAdded"], "parkedLines": data["parkedLines"],
                       "pending": data["pending"], "sessions": data["sessions"],
                       "rejectedByCode": data["rejectedByCode"]})
        for path in data["rewritten"]:
            self.status.last_error = f"INGEST_REWRITTEN_SOURCE: {path}"
            self.emit({"event": "rewritten", "source": path,
                       "code": "INGEST_REWRITTEN_SOURCE",
                       "message": "the file changed before the point already ingested; it "
                                  "was not merged"})
        for item in data["unreadable"]:
            self.status.last_error = f"unreadable: {item['source']}"
            self.emit({"event": "unreadable", **item})

    # --- the run ------------------------------------------------------------------------------

    def catch_up(self) -> None:
        existing = [r for r in self.roots if r.exists()]
        files = list(iter_log_files(existing))
        self.emit({"event": "started", "roots": self.status.roots, "files": len(files),
                   "missingRoots": [str(r) for r in self.roots if not r.exists()]})
        self.ingest(files)
        self.status.files = len(self._known)

    def run(self) -> None:
        """Until `stop` is set: catch up, then ingest what notifications name."""
        self.catch_up()
        while not self.stop.is_set():
            existing = [r for r in self.roots if r.exists()]
            if not existing:
                self.stop.wait(self.tick_ms / 1000)
                if any(r.exists() for r in self.roots):
                    self.catch_up()
                continue
            restart = False
            # Lines written between the catch-up's read and the watch's start raise no
            # notification: the first wake-up of each watch (a change or a tick) looks again.
            rescan = True
            for changes in watchfiles.watch(
                    *existing, watch_filter=self._wanted, debounce=self.debounce_ms,
                    step=self.step_ms, stop_event=self.stop, rust_timeout=self.tick_ms,
                    yield_on_timeout=True, raise_interrupt=False,
                    ignore_permission_denied=True):
                if rescan:
                    rescan = False
                    self.ingest(list(iter_log_files(existing)))
                if changes:
                    # A database's -wal changing is the database changing.
                    paths = list(dict.fromkeys(Path(source_of(PurePath(p)))
                                               for change, p in changes
                                               if change != watchfiles.Change.deleted))
                    # A new folder's first files may be written before its watch is added:
                    # look inside it.
                    self.ingest([*(p for p in paths if not p.is_dir()),
                                 *iter_log_files([p for p in paths if p.is_dir()])])
                elif self._retry:
                    self.ingest([])
                appeared = [r for r in self.roots if r not in existing and r.exists()]
                if appeared:  # a root created after the start: watch it too
                    self.ingest(list(iter_log_files(appeared)))
                    restart = True
                    break
                if self.stop.is_set():
                    break
            if not restart and not self.stop.is_set():
                self.stop.wait(self.tick_ms / 1000)  # a watched root vanished: look again
        self.emit({"event": "stopped", "events": self.status.events,
                   "batches": self.status.batches})

    @staticmethod
    def _wanted(change: watchfiles.Change, path: str) -> bool:
        return is_log_file(path) or (change == watchfiles.Change.added and os.path.isdir(path))

    def stop_on_signals(self) -> None:
        """SIGINT and SIGTERM end the run after the current batch."""
        def handle(signum: int, frame: Any) -> None:
            self.stop.set()

        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)
