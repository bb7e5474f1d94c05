"""Storage and read side: a large session's parsed log and fold, kept between reads of it.

A session's stored log only changes by appends, and every append bumps its `revision` in the
same transaction; so (shard file, epoch, session number, revision) names one exact log. Reading a
large session whole (the web transcript, an event's trace) then loads, parses and folds it once
per revision instead of once per request. Only sessions of at least `MIN_EVENTS` events are kept
(a small one reads fast), and only the `KEEP` most recently read."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from projections.fold import SurfaceFold, fold_surface
from projections.trace import EventTrace

MIN_EVENTS = 2_000
KEEP = 2

#: (shard file, shard epoch, session number, revision)
Key = tuple[str, str, int, int]


@dataclass(slots=True)
class FoldedLog:
    """One revision of a session's log, validated by its fold. Its events are shared by every
    reader: callers must not mutate them."""

    events: tuple[dict[str, Any], ...]
    fold: SurfaceFold
    _trace: _TraceIndex | None = field(default=None)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, seq: int) -> EventTrace | None:
        """The trace of `seq` (projections/trace.py's answer), None when no event has that seq."""
        with self._lock:
            if self._trace is None:
                self._trace = _TraceIndex.of(self.events, self.fold)
            index = self._trace
        return index.trace(seq)


@dataclass(frozen=True, slots=True)
class _TraceIndex:
    by_seq: dict[int, dict[str, Any]]
    replacer_of: dict[int, int]
    replaced: dict[int, tuple[int, ...]]
    derived: dict[int, list[int]]

    @classmethod
    def of(cls, events: Sequence[dict[str, Any]], fold: SurfaceFold) -> _TraceIndex:
        replacer_of: dict[int, int] = {}
        replaced: dict[int, tuple[int, ...]] = {}
        for rep in fold.replacements:
            for shadowed in rep.shadowed_seqs:
                replacer_of[shadowed] = rep.seq
            # the last replacement an event made wins, as in projections/trace.py
            replaced[rep.seq] = rep.shadowed_seqs
        derived: dict[int, list[int]] = {}
        for event in events:
            cited = event.get("sourceEventSeqs")
            if isinstance(cited, list):
                # the fold validated these: distinct non-negative integers
                for source in cited:
                    derived.setdefault(source, []).append(int(event["seq"]))
        # the fold validated the seqs too: consecutive integers
        return cls({int(e["seq"]): e for e in events}, replacer_of, replaced, derived)

    def trace(self, seq: int) -> EventTrace | None:
        target = self.by_seq.get(seq)
        if target is None:
            return None
        chain: list[int] = []
        cursor = self.replacer_of.get(seq)
        while cursor is not None:
            chain.append(cursor)
            cursor = self.replacer_of.get(cursor)
        cited = target.get("sourceEventSeqs")
        return EventTrace(seq, self.replacer_of.get(seq), chain, list(self.replaced.get(seq, ())),
                          list(cited) if isinstance(cited, list) else None,
                          list(self.derived.get(seq, ())))


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
