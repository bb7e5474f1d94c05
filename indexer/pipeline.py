"""Storage and read side: a writer thread that applies index batches while the caller prepares
the next ones (issue 16, item 3).

SQLite runs without the GIL (APSW releases it around every statement), so FTS5 tokenizing,
B-tree inserts and zstd compressing run on a second core while the caller's thread reads,
validates and folds the next events. Batches are applied in submission order; when the writer
falls behind, the batches waiting in the queue are applied together, one transaction per shard
(fewer commits). A failed group is retried one batch at a time, so the batches before the
failing one still commit and the error names the right batch; the first error is raised to the
caller at its next `submit` or at `close`.

Parallel only if the writer gets the GIL back quickly after each GIL-free SQLite call: with a
busy Python thread beside it, CPython hands the GIL over only after the switch interval (5 ms by
default), so a writer making thousands of short calls spends most of its time waiting and the
ingest uses little more than one of two cores. Hence (1) the writer makes few,
large calls (one JSON-array statement per table per transaction, one compression call per run
of blocks: indexer/writer.py) and (2) while a writer thread runs, the switch interval is
SWITCH_INTERVAL_S (restored when the last writer thread stops).

While a writer thread runs, the collector's young-generation threshold is raised too
(BULK_GC_THRESHOLDS): a bulk write allocates millions of acyclic objects (parsed events, records)
that reference counting frees; with the default threshold (700) the collector scans the
survivors again and again, a large share of the reader's CPU.
"""

from __future__ import annotations

import gc
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from projections.records import IndexRecord

Batch = tuple[Sequence[IndexRecord], Mapping[str, int]]
#: Called on the writer thread before a batch is applied (e.g. making its source durable).
Before = Callable[[], Any]
#: Batches waiting for the writer at most (the caller blocks beyond: bounded memory).
QUEUE_BATCHES = 64
#: Records applied in one transaction at most when batches are grouped.
GROUP_RECORDS = 20_000

#: How long a group waits for more batches (until GROUP_RECORDS) before it is applied; a
#: `drain` or `close` applies it at once. Few large transactions cost far less than many small
#: ones: every commit rewrites the same tail pages of the FTS segments and tables into the WAL
#: and brings the next checkpoint closer (one session per transaction costs the writer about
#: twice as much per event as a group of many).
GROUP_WAIT_S = 0.25

#: How often a group collected while the one before it is applied checks for its answer.
BUSY_POLL_S = 0.01

_STOP: Any = object()
_FLUSH: Any = object()
#: The GIL switch interval while a writer thread runs: how long the writer may wait for the GIL
#: after a SQLite call (short enough to keep the writer near its speed alone; the reader thread
#: pays a little per forced switch).
SWITCH_INTERVAL_S = 0.0001

#: gc thresholds while a writer thread runs (generation 0, 1, 2); never lowered.
BULK_GC_THRESHOLDS = (100_000, 20, 100)


def use_bulk_gc() -> None:
    """BULK_GC_THRESHOLDS for the rest of this process's life: for a process that does nothing
    but bulk work (a Kafka worker's fold and index roles, which decode, fold and write every
    event the same way the writer thread's ingest does)."""
    gc.set_threshold(*_raised(gc.get_threshold()))


def _raised(thresholds: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(a, b) for a, b in zip(thresholds, BULK_GC_THRESHOLDS, strict=True))


_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0
_gc_saved: tuple[int, ...] = ()


def _enter_bulk_mode() -> None:
    global _switch_users, _switch_saved, _gc_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_saved, SWITCH_INTERVAL_S))
            _gc_saved = gc.get_threshold()
            gc.set_threshold(*_raised(_gc_saved))
        _switch_users += 1


def _leave_bulk_mode() -> None:
    global _switch_users
    with _switch_lock:
        _switch_users -= 1
        if _switch_users == 0:
            sys.setswitchinterval(_switch_saved)
            gc.set_threshold(*_gc_saved)


@contextmanager
def bulk_mode() -> Iterator[None]:
    """The writer thread's switch interval and gc thresholds within the block, for bulk work
    on the calling thread (a reindex job's fold); nests with writer threads."""
    _enter_bulk_mode()
    try:
        yield
    finally:
        _leave_bulk_mode()


class Overlapped(Protocol):
    """A write in three steps, so the writer thread can prepare the next group (run its
    `before`s, encode it) while the previous one is still being written elsewhere (a writer
    process: indexer/writerproc.py). One write is outstanding at a time."""

    def prepare(self, records: Sequence[IndexRecord], positions: Mapping[str, int]) -> Any:
        """The write's request, ready to send (nothing is written yet)."""

    def send(self, request: Any) -> None:
        """Start applying a prepared request; its outcome comes with `result`."""

    def result(self) -> Any:
        """Wait for the outcome of the request sent last: its value, or its error raised."""

    def ready(self) -> bool:
        """Whether the outcome of the request sent last is in (`result` would not wait)."""


def merge(batches: Sequence[Batch]) -> Batch:
    """Several batches as one: records in order, each source at its furthest position."""
    records: list[IndexRecord] = []
    positions: dict[str, int] = {}
    for batch_records, batch_positions in batches:
        records.extend(batch_records)
        for source, position in batch_positions.items():
            positions[source] = max(position, positions.get(source, position))
    return records, positions


class WriterThread:
    """Applies submitted batches with `write(records, positions)` on its own thread."""

    def __init__(self, write: Callable[[Sequence[IndexRecord], Mapping[str, int]], Any], *,
                 overlapped: Overlapped | None = None) -> None:
        """`overlapped`: the same writes in steps (`write` must be its prepare, send and
        result in one): a group is then prepared, its `before`s run, while the group before
        it is still being applied, and sent once that one is answered (so a `before` may run
        although the group before it then fails; nothing is sent after a failure)."""
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_BATCHES)
        self._error: BaseException | None = None
        self._overlapped = overlapped
        self._thread = threading.Thread(
            target=self._run if overlapped is None else self._run_overlapped,
            name="recall-index-writer", daemon=True)
        _enter_bulk_mode()
        self._thread.start()
        self._closed = False

    def submit(self, records: Sequence[IndexRecord], positions: Mapping[str, int],
               before: Before | None = None) -> None:
        """Queue a batch; `before`, if given, runs on the writer thread before the batch (and
        any batch grouped with it) is applied, and an error it raises fails the batch."""
        self._raise()
        self._queue.put((records, dict(positions), before))

    def is_current(self) -> bool:
        """Whether the calling thread is this writer."""
        return threading.current_thread() is self._thread

    def drain(self) -> None:
        """Wait until every batch submitted so far is applied; raise the first error, if any."""
        self._queue.put(_FLUSH)  # ends a group that is waiting for more batches
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Drain, then stop the thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()
            _leave_bulk_mode()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._queue.task_done()
                return
            if item is _FLUSH:
                self._queue.task_done()
                continue
            group, markers, stop = self._collect(item)
            if self._error is None:  # after an error the rest is dropped (the caller raises)
                self._apply(group)
            for _ in range(len(group) + markers):
                self._queue.task_done()
            if stop:
                return

    def _collect(self, item: Any, busy: Callable[[], bool] | None = None
                 ) -> tuple[list[Any], int, bool]:
        """`item` and the batches queued after it, up to GROUP_RECORDS or GROUP_WAIT_S (and
        past it while `busy()`: the group before is still being applied, so waiting costs
        nothing and a fuller group fewer transactions); the number of markers taken (0 or 1)
        and whether it was _STOP."""
        group = [item]
        size = len(item[0])
        deadline = time.monotonic() + GROUP_WAIT_S
        while size < GROUP_RECORDS:
            wait = deadline - time.monotonic()
            if wait <= 0:
                if busy is None or not busy():
                    break
                wait = BUSY_POLL_S
            try:
                more = self._queue.get(timeout=wait)
            except queue.Empty:
                continue
            if more is _STOP or more is _FLUSH:
                return group, 1, more is _STOP
            group.append(more)
            size += len(more[0])
        return group, 0, False

    def _run_overlapped(self) -> None:
        """`_run` with one group in flight: while it is applied, the next is collected,
        its `before`s run and its request prepared; it is sent once the one in flight is
        answered. The errors are `_apply`'s: a failed group is retried batch by batch, and
        nothing is sent after an error."""
        remote = self._overlapped
        assert remote is not None
        flight: tuple[list[Batch], int] | None = None  # (its batches, its queue items)
        while True:
            if flight is None:
                item = self._queue.get()
            else:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:  # nothing to prepare: take the answer meanwhile
                    self._land(flight)
                    flight = None
                    continue
            if item is _STOP or item is _FLUSH:
                if flight is not None:
                    self._land(flight)
                    flight = None
                self._queue.task_done()
                if item is _STOP:
                    return
                continue
            busy = None if flight is None else (lambda: not remote.ready())
            group, markers, stop = self._collect(item, busy)
            batches: list[Batch] = []
            failed: BaseException | None = None
            request: Any = None
            if self._error is None:
                for records, positions, before in group:
                    if before is not None:
                        try:
                            before()
                        except BaseException as exc:  # the batches before this one still commit
                            failed = exc
                            break
                    batches.append((records, positions))
                if batches:
                    try:
                        request = remote.prepare(*merge(batches))
                    except BaseException as exc:
                        failed, batches = failed or exc, []
            if flight is not None:
                self._land(flight)
                flight = None
            sent = False
            if self._error is None and batches:
                try:
                    remote.send(request)
                    sent = True
                except BaseException as exc:
                    self._error = exc
            if failed is not None:
                self._error = self._error or failed
            if sent:
                flight = (batches, len(group))
                if failed is not None or markers:  # (an error or a drain: answered now)
                    self._land(flight)
                    flight = None
            else:
                for _ in range(len(group)):
                    self._queue.task_done()
            for _ in range(markers):
                self._queue.task_done()
            if stop:
                return

    def _land(self, flight: tuple[list[Batch], int]) -> None:
        """Take the answer of the group in flight; if it failed, retry it batch by batch (with
        `write`) as `_apply` does; then mark its queue items done."""
        batches, items = flight
        assert self._overlapped is not None
        try:
            try:
                self._overlapped.result()
            except BaseException as exc:
                if len(batches) == 1:
                    self._error = self._error or exc
                else:
                    self._retry(batches)
        finally:
            for _ in range(items):
                self._queue.task_done()

    def _apply(self, queued: list[tuple[Sequence[IndexRecord], Mapping[str, int],
                                        Before | None]]) -> None:
        group: list[Batch] = []
        for records, positions, before in queued:
            if before is not None:
                try:
                    before()
                except BaseException as exc:  # the batches before this one still commit
                    self._error = exc
                    break
            group.append((records, positions))
        if not group:
            return
        try:
            self._write(*merge(group))
            return
        except BaseException as exc:  # handed to the caller's thread
            if len(group) == 1:
                self._error = self._error or exc
                return
        self._retry(group)

    def _retry(self, group: Sequence[Batch]) -> None:
        """After a group failed: its batches one at a time, so those before the failing one
        commit and the error is the failing batch's."""
        for batch in group:
            try:
                self._write(*batch)
            except BaseException as exc:
                self._error = self._error or exc
                return
