"""Embedded runtime, ingest edge: files and directories of session logs → the local store.

Incremental by design: a source whose size and mtime are unchanged costs a stat; a grown native
file is read from where the last ingest stopped (after checking the hash of what was consumed);
a rewritten or truncated file is reported and parked, never merged. Foreign formats are
re-imported whole (the importers are deterministic) and the store keeps only the events it has
not seen.

Nothing read is lost, and the count proves it: every record read (a line, or a whole file when
the file itself is rejected) is ingested, skipped as an exact duplicate, parked in the dead
letters, or pending (an unterminated last line, taken once a newline completes it):
`linesRead == ingested + duplicatesSkipped + parked + pending` (`IngestReport.accounting`).
Sources are read under caps (streams/ingest/sourcefile.py) and parsed losslessly
(projections/codec.py); an importer that raises parks its file whole
(INGEST_IMPORTER_FAILED) and the run goes on. Callers hold the writer lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.codec import JSONDecodeError, check_value, dumps, dumps_sorted, loads
from projections.errors import (
    INGEST_AFTER_REJECTED,
    INGEST_DUPLICATE_CONFLICT,
    INGEST_OVERSIZED_EVENT,
    RECALL_IO_ERROR,
    InputRejected,
    StoreCorrupt,
)
from projections.fold import Step, SurfaceState
from projections.logformat import DEFAULT_MAX_FILE_BYTES, LogBuilder, Rejection
from streams.core.atomic import replace_file
from streams.core.store import DeadLetters, SessionStore, StoredSession
from streams.ingest.importers.registry import Importer as Importer
from streams.ingest.plan import (
    Detect,
    ParkWhole,
    Reading,
    ReadPlan,
    Unchanged,
    count_pending,
    count_taken,
    import_foreign,
    importer_failed,
    normalize_importers,
    park_whole,
    plan_file,
    planned_lines,
    reimport_conflict,
    source_key,
)
from streams.ingest.sourcefile import SourceText, Span

LOG_SUFFIXES = (".jsonl", ".jsonl.zst", ".jsonl.zstd")
#: Save the registry of sources after this many files at least, so a killed run repeats little
#: work (a re-run reads the files read since the last save again; the store skips what it holds).
SAVE_EVERY_FILES = 200
#: ... and once the registry has grown, after this share of the files done so far: each save
#: writes (and fsyncs) the whole registry, so a save every SAVE_EVERY_FILES files would cost a
#: run time that grows with the square of its file count; this way the saves' total stays a
#: fixed share of the run (and a killed run repeats at most this share of what it had done).
SAVE_GROWTH = 0.1


def save_due(done: int, saved: int) -> bool:
    """Whether the registry is saved after file `done` of a run that saved after file `saved`."""
    return done - saved >= max(SAVE_EVERY_FILES, int(saved * SAVE_GROWTH))

#: Called after events were appended to the store: (header, state before, new events, their
#: fold steps, so the index need not fold them again, and their serializations where known:
#: ParsedLog.raws).
OnAppend = Callable[[Mapping[str, Any], SurfaceState, Sequence[Mapping[str, Any]],
                     Sequence[Step], Sequence[bytes | None]], None]


@dataclass(slots=True)
class IngestReport:
    """Counts of one ingest run. Records read: `lines == headers + linesAccepted +
    duplicateLines + parkedLines + pending` (see `accounting`)."""

    files: int = 0
    unchanged: int = 0
    lines: int = 0
    headers: int = 0
    lines_accepted: int = 0
    duplicate_lines: int = 0
    parked_lines: int = 0
    pending: int = 0
    events_added: int = 0
    duplicate_events: int = 0
    events_parked: int = 0
    rejected: int = 0
    dead_letters_added: int = 0
    sessions: set[str] = field(default_factory=set)
    rewritten: list[str] = field(default_factory=list)
    pending_sources: list[str] = field(default_factory=list)
    unreadable: list[dict[str, str]] = field(default_factory=list)
    #: Files of a walked directory that look like agent logs but were not read: path, why, force.
    passed_over: list[dict[str, str]] = field(default_factory=list)
    rejected_by_code: dict[str, int] = field(default_factory=dict)

    def count_rejections(self, rejections: Sequence[Rejection]) -> None:
        self.rejected += len(rejections)
        for r in rejections:
            self.rejected_by_code[r.code] = self.rejected_by_code.get(r.code, 0) + 1

    def accounting(self) -> dict[str, Any]:
        ingested = self.headers + self.lines_accepted
        return {"linesRead": self.lines, "ingested": ingested,
                "duplicatesSkipped": self.duplicate_lines, "parked": self.parked_lines,
                "pending": self.pending,
                "balanced": self.lines == (ingested + self.duplicate_lines + self.parked_lines
                                           + self.pending)}

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "unchanged": self.unchanged, "lines": self.lines,
                "headers": self.headers, "linesAccepted": self.lines_accepted,
                "duplicateLines": self.duplicate_lines, "parkedLines": self.parked_lines,
                "pending": self.pending, "eventsAdded": self.events_added,
                "duplicateEvents": self.duplicate_events, "eventsParked": self.events_parked,
                "rejected": self.rejected, "deadLettersAdded": self.dead_letters_added,
                "sessions": len(self.sessions), "rewritten": list(self.rewritten),
                "pendingSources": list(self.pending_sources),
                "unreadable": list(self.unreadable),
                "passedOver": list(self.passed_over),
                "rejectedByCode": dict(self.rejected_by_code),
                "accounting": self.accounting()}


def iter_log_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Files as given, and every log file below given directories, in a stable order: JSONL
    logs, the files a supported agent writes under other names (the importer registry's), and
    JSON files whose first bytes a supported format recognises, whatever their name."""
    from streams.ingest.importers.detect import claims_log_name, sniffs_as_log

    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and (child.name.endswith(LOG_SUFFIXES)
                                        or claims_log_name(child) or sniffs_as_log(child)):
                    yield child
        else:
            yield path


class _StoreFeed(LogBuilder):
    """A LogBuilder that continues the stored session and skips exact duplicates."""

    def __init__(self, store: SessionStore, *, max_event_bytes: int,
                 header: dict[str, Any] | None = None,
                 stored: StoredSession | None = None) -> None:
        super().__init__(max_event_bytes=max_event_bytes, header=header,
                         state=stored.state if stored else None)
        self.store = store
        self.stored = stored

    def accept_header(self, header: dict[str, Any]) -> None:
        self.stored = self.store.check_header(header)
        if self.stored is not None:
            self.log.state = self.stored.state
            self.base_seq = self.stored.state.next_seq

    def feed_event(self, event: dict[str, Any], raw: bytes | None = None) -> None:
        base = self.stored.state.next_seq if self.stored else 0
        seq = event.get("seq")
        if isinstance(seq, int) and seq < base:
            self.store.classify(self.stored, event, raw)  # raises on a conflicting duplicate
            self.duplicates += 1
            return
        super().feed_event(event, raw)

    def feed_oversized(self, number: int, span: Span, limit: int) -> None:
        """A line blanked at read time for being over the cap: parked as a bounded record."""
        self.log.lines += 1
        code = INGEST_AFTER_REJECTED if self.blocked else INGEST_OVERSIZED_EVENT
        reason = ("an earlier line of this session was rejected" if self.blocked
                  else f"line is {span.length} bytes; the limit is {limit}")
        self._block(Rejection(number, code, reason, b"", digest=span.digest, length=span.length,
                              offset=span.offset))


class Ingestor:
    """Moves sources into the store, parks rejections, and tells `on_append` what is new."""

    def __init__(self, data_dir: Path, store: SessionStore, dead_letters: DeadLetters,
                 on_append: OnAppend, *, max_event_bytes: int,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 importers: Mapping[str, Importer] | None = None,
                 detect: Detect | None = None) -> None:
        self.registry_path = data_dir / "sources.json"
        self.store = store
        self.dead_letters = dead_letters
        self.on_append = on_append
        self.max_event_bytes = max_event_bytes
        self.max_file_bytes = max_file_bytes
        self.importers = normalize_importers(importers)
        self.detect = detect
        self._registry: dict[str, dict[str, Any]] | None = None

    # --- the registry of ingested sources ------------------------------------------------------

    @property
    def registry(self) -> dict[str, dict[str, Any]]:
        if self._registry is None:
            self._registry = self._load_registry()
        return self._registry

    def invalidate(self) -> None:
        """Reread the registry next time: another process may have ingested meanwhile."""
        self._registry = None

    def _load_registry(self) -> dict[str, dict[str, Any]]:
        try:
            data = self.registry_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            value = loads(data)
        except JSONDecodeError as exc:
            value = exc
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise StoreCorrupt(
                f"{self.registry_path} (the registry of ingested sources) cannot be read",
                hint=f"move it aside (mv {self.registry_path} {self.registry_path}.bad) and "
                "ingest again: every source is then re-read, and what the store already holds "
                "is skipped as exact duplicates")
        return value

    def _save_registry(self) -> None:
        # The registry says which lines are consumed: the store must hold them durably first.
        self.store.sync()
        replace_file(self.registry_path, dumps_sorted(self.registry))

    # --- runs ----------------------------------------------------------------------------------

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        report = IngestReport()
        files = list(iter_log_files(paths))
        saved = 0
        for done, path in enumerate(files, start=1):
            report.files += 1
            try:
                self._ingest_file(path, fmt, report)
            except OSError as exc:  # vanished or unreadable: say so and go on with the others
                report.unreadable.append({"source": source_key(path),
                                          "error": f"{type(exc).__name__}: {exc.strerror or exc}",
                                          "code": getattr(exc, "code", RECALL_IO_ERROR)})
            if save_due(done, saved):
                self._save_registry()
                saved = done
            if progress is not None:
                progress(done, len(files))
        self._save_registry()
        return report

    def _ingest_file(self, path: Path, fmt: str, report: IngestReport) -> None:
        key = source_key(path)
        seen = self.registry.get(key)
        step = plan_file(path, seen or {}, fmt=fmt, importers=self.importers, detect=self.detect,
                         max_event_bytes=self.max_event_bytes,
                         max_file_bytes=self.max_file_bytes, report=report)
        if isinstance(step, Unchanged):
            return
        if isinstance(step, ParkWhole):
            self._park_file(key, path, step.code, step.reason, report)
            self.registry[key] = step.entry
            return
        if step.spec is None:
            entry: dict[str, Any] | None = self._ingest_native(
                key, step.src, step.plan, seen if step.plan.first_line > 1 else None, report)
        else:
            entry = self._ingest_foreign(key, path, step, report)
        if entry is None:  # the importer failed: the file is parked; try again next run
            return
        for code, reason, stopped_at in step.tail():
            self._park_file(key, path, code, reason, report, stopped_at=stopped_at)
        count_pending(step, key, report)
        self.registry[key] = step.entry(entry)

    # --- native logs ---------------------------------------------------------------------------

    def _ingest_native(self, key: str, src: SourceText, plan: ReadPlan,
                       seen: dict[str, Any] | None, report: IngestReport) -> dict[str, Any]:
        header: dict[str, Any] | None = None
        stored: StoredSession | None = None
        if seen is not None and seen.get("sessionId") is not None:
            stored = self.store.load(str(seen["sessionId"]))
            header = stored.header if stored else None
        feed = _StoreFeed(self.store, max_event_bytes=self.max_event_bytes, header=header,
                          stored=stored)
        feed.blocked = bool(seen and seen.get("blocked"))
        # Per line (the hot loop of a bulk ingest): what it did, from the builder's list sizes.
        rejections, events = feed.log.rejections, feed.log.events  # appended to in place
        lines = parked = headers = accepted = duplicates = 0
        for number, line in planned_lines(src, plan):
            lines += 1
            rejected, added = len(rejections), len(events)
            had_header = feed.log.header is not None
            if line is None:
                feed.feed_oversized(number, src.oversized[number], self.max_event_bytes)
            else:
                feed.feed_line(number, line)
            if len(rejections) > rejected:
                parked += 1
            elif len(events) > added:
                accepted += 1
            elif not had_header and feed.log.header is not None:
                headers += 1
            else:  # an exact duplicate (or a chunk row of duplicates only)
                duplicates += 1
        report.lines += lines
        report.parked_lines += parked
        report.headers += headers
        report.lines_accepted += accepted
        report.duplicate_lines += duplicates
        sid = str(feed.log.header["id"]) if feed.log.header else None
        # A header alone is stored too: an agent writes it before its first event, and the
        # lines that follow must find it (else they would be parked as INGEST_MISSING_HEADER).
        if feed.log.header is not None and (feed.log.events or feed.stored is None):
            before = feed.stored.state if feed.stored else SurfaceState()
            self.store.append(feed.log.header, feed.log.events, feed.log.state, feed.log.raws,
                              durable=False)  # fsynced per batch: see SessionStore.sync
            self.on_append(feed.log.header, before, feed.log.events, feed.log.steps,
                           feed.log.raws)
        if sid is not None:
            report.sessions.add(sid)
        report.events_added += len(feed.log.events)
        self._park(key, feed.log.rejections, sid, report)
        return {"sessionId": sid, "blocked": feed.blocked}

    # --- foreign formats -----------------------------------------------------------------------

    def _next_seq(self, session_id: str) -> int:
        stored = self.store.load(session_id)
        return stored.state.next_seq if stored is not None else 0

    def _ingest_foreign(self, key: str, path: Path, step: Reading,
                        report: IngestReport) -> dict[str, Any] | None:
        """Foreign importers are deterministic and need no look-ahead, so a grown file re-imports
        whole and the store keeps only events it has not seen (exact duplicates skip)."""
        spec = step.spec
        assert spec is not None
        read = import_foreign(step, key, max_event_bytes=self.max_event_bytes,
                              next_seq=self._next_seq, log_dir=self.registry_path.parent)
        if isinstance(read, BaseException):
            code, reason = importer_failed(step.kind, read)
            self._park_file(key, path, code, reason, report)
            return None
        imported, screened, plan = read.sessions, read.screened, step.plan
        new_lines = range(plan.first_line, plan.last_line + 1)
        line_parked: set[int] = set()
        for header, events, rejections in imported:
            sid = str(header["id"])
            parked = [r for r in rejections if r.line in new_lines or r.line == 0]
            line_parked.update(r.line for r in parked)
            if spec.settles_header:
                known = self.store.load(sid)
                header = spec.settle_header(known.header if known else None, header)
            try:
                stored = self.store.check_header(header)
            except InputRejected as exc:
                conflict = Rejection(0, exc.code, exc.message, dumps(header))
                report.sessions.add(sid)  # stored under the other header
                self._park(key, [conflict, *parked], sid, report)
                self.dead_letters.park(key, rejections, sid)  # the earlier lines' (idempotent)
                report.events_parked += 1
                continue
            if spec.whole_document and stored is not None:
                events = spec.extend(self.store.read(sid)[1], events)
            feed = _StoreFeed(self.store, max_event_bytes=self.max_event_bytes, header=header,
                              stored=stored)
            before = feed.log.state
            event_parked: list[Rejection] = []
            for i, event in enumerate(events):
                try:
                    check_value(event)
                    feed.feed_event(event, _imported_line(event, self.max_event_bytes))
                except InputRejected as exc:
                    if exc.code == INGEST_DUPLICATE_CONFLICT and key in self.registry:
                        # What this file imported before is not a prefix of this import: it was
                        # rewritten, or an older importer version mapped it. Reported once per
                        # file, with the file's bytes (another file claiming the session with
                        # different events stays an event-level conflict).
                        if key not in report.rewritten:
                            report.rewritten.append(key)
                            code, reason = reimport_conflict(sid, event["seq"])
                            self._park_file(key, path, code, reason, report)
                        break
                    event_parked.append(Rejection(0, exc.code, f"imported event #{i}: "
                                                  f"{exc.message}", dumps(event)))
                    event_parked.extend(
                        Rejection(0, INGEST_AFTER_REJECTED, f"imported event #{j}: an earlier "
                                  "event of this session was rejected", dumps(e))
                        for j, e in enumerate(events[i + 1:], start=i + 1))
                    break
            report.events_added += len(feed.log.events)
            report.duplicate_events += feed.duplicates
            report.events_parked += len(event_parked)
            # Counted when it exists: a session whose every event was parked is not stored.
            if feed.log.events or stored is not None:
                report.sessions.add(sid)
            if feed.log.events:
                self.store.append(header, feed.log.events, feed.log.state, feed.log.raws,
                                  durable=False)
                self.on_append(header, before, feed.log.events, feed.log.steps, feed.log.raws)
            self._park(key, [*parked, *event_parked], sid, report)
            self.dead_letters.park(key, rejections, sid)  # the earlier lines' (idempotent)
        self._park(key, [r for r in screened if r.line in new_lines], None, report)
        self.dead_letters.park(key, screened, None)
        count_taken(step, line_parked | {r.line for r in screened}, report)
        return {}

    # --- parking -------------------------------------------------------------------------------

    def _park(self, source: str, rejections: Sequence[Rejection], session_id: str | None,
              report: IngestReport) -> None:
        report.count_rejections(rejections)
        report.dead_letters_added += self.dead_letters.park(source, rejections, session_id)

    def _park_file(self, key: str, path: Path, code: str, reason: str, report: IngestReport,
                   *, stopped_at: int | None = None) -> None:
        """Park a whole source file: its bytes as on disk when they fit a record, else a bounded
        record (length and digest of the file; the bytes stay in the source)."""
        rejection = park_whole(path, code, reason, self.dead_letters.max_record_bytes, report,
                               stopped_at=stopped_at)
        self._park(key, [rejection], None, report)


def _imported_line(event: dict[str, Any], max_bytes: int) -> bytes:
    """An imported event's log line (the store writes these bytes: no second dump). The cap on
    a line holds for it too: with data.raw beside the mapped content it can exceed the cap its
    source record passed, and the Kafka fold parks such a line, so the embedded store parks it
    as well (both then keep the same events)."""
    line = dumps(event)
    size = len(line)
    if size > max_bytes:
        raise InputRejected(f"its line is {size} bytes; the limit is {max_bytes} "
                            "(RECALL_MAX_EVENT_BYTES)", code=INGEST_OVERSIZED_EVENT)
    return line
