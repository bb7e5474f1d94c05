"""Storage and read side: a large session's parsed log and fold, kept between reads of it.

A session's stored log only changes by appends, and every append bumps its `revision` in the
same transaction; so (shard file, epoch, session number, revision) names one exact log. Reading a
large session whole (`read_session`) then loads, parses and folds it once per revision instead
of once per request. Only sessions of at least `MIN_EVENTS` events are kept
(a small one reads fast), and only the `KEEP` most recently read."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from projections.fold import SurfaceFold, fold_surface

MIN_EVENTS = 2_000
KEEP = 2

#: (shard file, shard epoch, session number, revision)
Key = tuple[str, str, int, int]


@dataclass(frozen=True, slots=True)
class FoldedLog:
    """One revision of a session's log, validated by its fold. Its events are shared by every
    reader: callers must not mutate them."""

    events: tuple[dict[str, Any], ...]
    fold: SurfaceFold


class FoldCache:
    """The `KEEP` most recently read large logs, by exact revision."""

    def __init__(self) -> None:
        self._logs: OrderedDict[Key, FoldedLog] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key, event_count: int,
            load: Callable[[], list[dict[str, Any]]]) -> FoldedLog:
        """The folded log under `key`, loading and folding it (FoldError if it does not fold)
        when it is not kept."""
        with self._lock:
            found = self._logs.get(key)
            if found is not None:
                self._logs.move_to_end(key)
                return found
        events = tuple(load())
        folded = FoldedLog(events, fold_surface(events))
        if event_count >= MIN_EVENTS:
            with self._lock:
                self._logs[key] = folded
                while len(self._logs) > KEEP:
                    self._logs.popitem(last=False)
        return folded
