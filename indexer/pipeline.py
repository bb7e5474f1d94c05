"""Storage and read side: a writer thread that applies index batches while the caller prepares
the next ones (issue 16, item 3).

SQLite runs without the GIL (APSW releases it around every statement), so FTS5 tokenizing,
B-tree inserts and zstd compressing run on a second core while the caller's thread reads,
validates and folds the next events. Batches are applied in submission order; when the writer
falls behind, the batches waiting in the queue are applied together, one transaction per shard
(fewer commits). A failed group is retried one batch at a time, so the batches before the
failing one still commit and the error names the right batch; the first error is raised to the
caller at its next `submit` or at `close`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from projections.records import IndexRecord

Batch = tuple[Sequence[IndexRecord], Mapping[str, int]]
#: Batches waiting for the writer at most (the caller blocks beyond: bounded memory).
QUEUE_BATCHES = 64
#: Records applied in one transaction at most when batches are grouped.
GROUP_RECORDS = 20_000

_STOP: Any = object()


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

    def __init__(self, write: Callable[[Sequence[IndexRecord], Mapping[str, int]], Any]) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_BATCHES)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="recall-index-writer",
                                        daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[IndexRecord], positions: Mapping[str, int]) -> None:
        self._raise()
        self._queue.put((records, dict(positions)))

    def is_current(self) -> bool:
        """Whether the calling thread is this writer."""
        return threading.current_thread() is self._thread

    def drain(self) -> None:
        """Wait until every batch submitted so far is applied; raise the first error, if any."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Drain, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join()
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
            group = [item]
            size = len(item[0])
            stop = False
            while size < GROUP_RECORDS:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                group.append(more)
                size += len(more[0])
            if self._error is None:  # after an error the rest is dropped (the caller raises)
                self._apply(group)
            for _ in range(len(group) + stop):
                self._queue.task_done()
            if stop:
                return

    def _apply(self, group: list[Batch]) -> None:
        try:
            self._write(*merge(group))
            return
        except BaseException as exc:  # handed to the caller's thread
            if len(group) == 1:
                self._error = exc
                return
        for batch in group:
            try:
                self._write(*batch)
            except BaseException as exc:
                self._error = exc
                return
