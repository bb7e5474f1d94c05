"""Ingest edge: one source file → what to read, the decision tree both runtimes follow.

The embedded ingest (streams/ingest/edge.py) and the Kafka shipper (streams/runtime/kafka/client.py)
differ only in where records go (the local store, or the events topic); which file is read, how
far, under which format, what is parked whole and why, how a foreign importer is run and how its
lines are counted is decided here, once:

1. unchanged size and mtime → nothing read (`Unchanged`);
2. no complete line decodable, no importer for the format, or a prefix changed before the point
   already consumed → the file parked whole (`ParkWhole`);
3. else the lines to read (`Reading`): after the runtime consumed them, `Reading.tail` says what
   is parked for a stop (size cap, corrupt compression) and `Reading.entry` what is remembered.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections.codec import JSONDecodeError, check_value, dumps, loads, loads_lossless
from projections.errors import (
    INGEST_CORRUPT_COMPRESSION,
    INGEST_FILE_TOO_LARGE,
    INGEST_IMPORTER_FAILED,
    INGEST_LOSSY_JSON,
    INGEST_OVERSIZED_EVENT,
    INGEST_REWRITTEN_SOURCE,
    INGEST_TOO_DEEP,
    INGEST_UNSUPPORTED_FORMAT,
    InputRejected,
)
from projections.logformat import Rejection
from streams.core.errorlog import log_exception
from streams.ingest.importers.common import ImportedSession
from streams.ingest.importers.registry import Importer, ImporterSpec, as_spec
from streams.ingest.sourcefile import SourceText, Span, read_source, span_hasher

#: A format detector: (path, first bytes) → format name, or None when it cannot tell.
Detect = Callable[[Path, bytes], str | None]

REWRITTEN_REASON = ("the file changed before the point already ingested; it was not merged "
                    "(re-ingest it under a new session or restore the original)")


@dataclass(slots=True)
class ReadPlan:
    """What to read from one source: the new lines' numbers and where the consumed part ends."""

    first_line: int
    last_line: int  # last line number taken (0: none)
    end: int  # decompressed offset just past the consumed part
    digest: str  # prefix hash of text[:end]
    pending: bool  # an unterminated last line is held back
    terminated: bool = True  # the last line taken ends with a newline


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Same size and mtime as when it was last read: not read at all."""


@dataclass(frozen=True, slots=True)
class ParkWhole:
    """The file is parked whole (`code`, `reason`) and `entry` remembered for it."""

    code: str
    reason: str
    entry: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reading:
    """The lines `plan` names are to be read, as `kind` ("dsh", or the registry format `spec`)."""

    kind: str
    spec: ImporterSpec | None
    src: SourceText
    plan: ReadPlan
    stamp: dict[str, Any]
    max_file_bytes: int

    @property
    def broken(self) -> str | None:
        return _broken(self.src)

    def tail(self) -> list[tuple[str, str, int]]:
        """(code, reason, stopped at) of the whole-file record parked after reading when
        reading stopped early (the lines before the stop were read)."""
        src = self.src
        if src.over_limit:
            return [(INGEST_FILE_TOO_LARGE, f"reading stopped after {self.max_file_bytes} "
                     "decompressed bytes (RECALL_MAX_FILE_BYTES); lines before that point were "
                     "ingested", src.complete_end)]
        broken = self.broken
        if broken:
            return [(INGEST_CORRUPT_COMPRESSION, f"{broken}; the complete lines before that "
                     "point were ingested", src.complete_end)]
        return []

    def entry(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """What to remember of the file after reading: `base`, then where reading stopped."""
        plan = self.plan
        return {**base, **self.stamp, "format": self.kind, "consumed": plan.end,
                "prefixHash": plan.digest, "lines": plan.last_line, "pending": plan.pending}


FileStep = Unchanged | ParkWhole | Reading


def normalize_importers(importers: Mapping[str, Importer] | None) -> dict[str, ImporterSpec]:
    """Registry specs as they are; a bare importer function as a spec with the defaults."""
    return {name: as_spec(name, importer) for name, importer in (importers or {}).items()}


def plan_file(path: Path, seen: Mapping[str, Any], *, fmt: str,
              importers: Mapping[str, ImporterSpec], detect: Detect | None,
              max_event_bytes: int, max_file_bytes: int, report: Any,
              stamp: Mapping[str, Any] | None = None) -> FileStep:
    """The decision for one file, given what was remembered of it (`seen`, {} if nothing).
    Counts what it decides on `report` (an IngestReport): unchanged files, their pending
    sources, rewritten files; the caller parks a `ParkWhole` and counts that."""
    key = source_key(path)
    stat = path.stat()
    database = _database(path, fmt, importers)
    stamped = {"size": stat.st_size, "mtime": stat.st_mtime_ns, **(stamp or {})}
    if database is not None and database.companions:
        stamped["companions"] = _companion_stats(path, database.companions)
    if seen.get("size") == stat.st_size and seen.get("mtime") == stat.st_mtime_ns \
            and seen.get("companions") == stamped.get("companions"):
        report.unchanged += 1
        if seen.get("pending"):
            report.pending_sources.append(key)
        return Unchanged()
    if database is not None:
        # Read by the importer itself (a database): no bytes, no lines; judged on its events.
        src = SourceText(b"", stat.st_size, False)
        return Reading(database.name, database, src, plan_reading(src, None, whole=True),
                       stamped, max_file_bytes)
    consumed = int(seen.get("consumed") or 0)
    src = read_source(path, max_line=max_event_bytes, max_total=max_file_bytes,
                      checkpoint=consumed or None)
    broken = _broken(src)
    if src.complete_end == 0 and broken:
        return ParkWhole(INGEST_CORRUPT_COMPRESSION,
                         f"{broken}; no complete line could be decoded", {**seen, **stamped})
    kind = fmt if fmt != "auto" else detect_format(path, src.text, detect)
    spec = importers.get(kind) if kind != "dsh" else None
    if kind != "dsh" and spec is None:
        return ParkWhole(INGEST_UNSUPPORTED_FORMAT,
                         f"no importer for format {kind!r} (kept whole: the file's bytes)",
                         {**seen, **stamped, "format": kind})
    # A whole-document format is rewritten whole as it grows: judged on its events, not bytes.
    whole = spec is not None and spec.whole_document
    if whole:
        consumed = 0
    if consumed and src.checkpoint_digest != seen.get("prefixHash"):
        report.rewritten.append(key)
        return ParkWhole(INGEST_REWRITTEN_SOURCE, REWRITTEN_REASON,
                         {**seen, **stamped, "format": kind})
    # lines read before: recorded, or (an entry of an older shipper) counted
    before = 0
    if consumed:
        before = int(seen["lines"]) if "lines" in seen else src.text.count(b"\n", 0, consumed)
    plan = plan_reading(src, {"lines": before} if before else None, whole=whole)
    return Reading(kind, spec, src, plan, stamped, max_file_bytes)


def _database(path: Path, fmt: str,
              importers: Mapping[str, ImporterSpec]) -> ImporterSpec | None:
    """The format that reads this source itself (a database), told by `--format` or by name."""
    for spec in importers.values():
        if spec.reads_source and (fmt == spec.name or (fmt == "auto" and spec.claims(path))):
            return spec
    return None


def _companion_stats(path: Path, suffixes: tuple[str, ...]) -> list[list[int] | None]:
    """[size, mtime] of each companion file (None when absent), e.g. a SQLite `-wal`."""
    out: list[list[int] | None] = []
    for suffix in suffixes:
        try:
            found = os.stat(f"{path}{suffix}")
        except OSError:
            out.append(None)
            continue
        out.append([found.st_size, found.st_mtime_ns])
    return out


def park_whole(path: Path, code: str, reason: str, max_bytes: int, report: Any, *,
               stopped_at: int | None = None) -> Rejection:
    """The whole file as one parked record, counted as one line read and parked."""
    report.lines += 1
    report.parked_lines += 1
    return whole_file_rejection(path, code, reason, max_bytes, stopped_at=stopped_at)


def count_pending(reading: Reading, key: str, report: Any) -> None:
    """An unterminated last line held back is a record read and pending."""
    if reading.plan.pending:
        report.pending += 1
        report.lines += 1
        report.pending_sources.append(key)


# --- foreign formats -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Imported:
    """An importer's sessions for the planned text, and the lines the edge screened out."""

    sessions: list[ImportedSession]
    screened: list[Rejection]
    resumed: bool  # mapped as a continuation of the lines read before (`spec.resume`)


def import_foreign(reading: Reading, key: str, *, max_event_bytes: int,
                   next_seq: Callable[[str], int], log_dir: Path) -> Imported | BaseException:
    """Run the importer on the planned lines (screened first, so every format gets the same
    rules). An importer whose events group several writes (`resume`) maps a grown file as a
    continuation numbered from `next_seq`; the others re-import the file whole. An importer
    that raises is logged with its traceback and its exception returned: the caller parks the
    file whole (`importer_failed`) and the run goes on."""
    spec = reading.spec
    assert spec is not None
    text, screened = screen_foreign(reading.src, reading.plan, max_event_bytes)
    done = reading.plan.first_line - 1
    resumed = spec.resume is not None and done > 0
    if spec.whole_document and screened and not text.strip():
        # the document was all in lines parked here (one compact line nested too deep): the
        # importer would only add an empty document's MALFORMED letter for the same bytes
        return Imported([], screened, resumed)
    try:
        sessions = checked_import(spec.resume(text, key, done, next_seq)
                                  if spec.resume is not None and resumed else spec(text, key))
    except Exception as exc:  # an importer bug must not end the run or lose the file
        log_exception(exc, log_dir, context=f"importer {reading.kind} failed on {key}")
        return exc
    return Imported(sessions, screened, resumed)


def importer_failed(kind: str, exc: BaseException) -> tuple[str, str]:
    return INGEST_IMPORTER_FAILED, (f"the {kind} importer failed ({type(exc).__name__}: "
                                    f"{str(exc)[:200]}); kept whole, retried on the next ingest")


def reimport_conflict(sid: str, seq: Any) -> tuple[str, str]:
    """What a file imported before is not a prefix of this import of it."""
    return INGEST_REWRITTEN_SOURCE, (
        f"session {sid}: seq {seq} imported before differs from a new import of this file (the "
        "file was rewritten, or an older importer version imported it); not merged: see "
        "streams/ingest/importers/MAPPING.md, Re-importing")


def count_taken(reading: Reading, parked: set[int], report: Any) -> None:
    """A foreign line taken is either parked (its number among `parked`) or imported."""
    taken = {n for n, _ in planned_lines(reading.src, reading.plan)}
    parked_now = len(taken & parked)
    report.lines += len(taken)
    report.parked_lines += parked_now
    report.lines_accepted += len(taken) - parked_now


# --- the rules under the decision ----------------------------------------------------------------


def source_key(path: Path) -> str:
    """The registry's and dead letters' name of a source: its resolved path, as text even when
    the file name is not UTF-8 (undecodable bytes are written as \\xNN)."""
    return os.fsencode(path.resolve()).decode("utf-8", "backslashreplace")


def _broken(src: SourceText) -> str | None:
    return src.corrupt or ("the zstd stream ends inside a frame (truncated)"
                           if src.truncated_frame else None)


def detect_format(path: Path, text: bytes, detect: Detect | None) -> str:
    """The format of a source: the importer registry's detection, else the native log (a
    session header on line 1), else "unknown"."""
    if detect is not None:
        found = detect(path, text[:65536])
        if found:
            return found
    first = text.split(b"\n", 1)[0]
    try:
        head = loads(first)
    except JSONDecodeError:
        return "unknown"
    return "dsh" if isinstance(head, dict) and head.get("type") == "session" else "unknown"


def plan_reading(src: SourceText, seen: Mapping[str, Any] | None, *,
                 whole: bool = False) -> ReadPlan:
    """Which lines to take. An unterminated last line is pending unless it already is a
    whole JSON object (a writer that omits the final newline); after a stop (cap, corrupt
    data) the bytes after the last newline belong to the parked remainder. A whole-document
    format takes everything: its importer judges whether the document is complete."""
    complete_lines = src.text.count(b"\n")
    first = int(seen.get("lines", 0)) + 1 if seen else 1
    tail = src.tail
    stopped = src.over_limit or src.corrupt is not None or src.truncated_frame
    tail_number = complete_lines + 1
    tail_oversized = tail_number in src.oversized
    if whole and tail and not stopped:
        return ReadPlan(1, tail_number, src.total, src.full_digest, False, False)
    if not tail.strip():
        # whitespace after the last newline is no line yet (a blank line is none either): not
        # read, not pending; it belongs to whatever line a writer completes there
        tail = b""
    if stopped or (not tail and not tail_oversized):
        return ReadPlan(first, complete_lines, src.complete_end, src.complete_digest, False)
    if tail and _is_whole_object(tail):
        return ReadPlan(first, tail_number, src.total, src.full_digest, False, False)
    return ReadPlan(first, complete_lines, src.complete_end, src.complete_digest, True)


def planned_lines(src: SourceText, plan: ReadPlan) -> list[tuple[int, bytes | None]]:
    """(number, bytes) of the planned non-blank lines; None for a line blanked as oversized."""
    out: list[tuple[int, bytes | None]] = []
    lines = src.text.split(b"\n")
    for number in range(plan.first_line, plan.last_line + 1):
        if number in src.oversized:
            out.append((number, None))
            continue
        line = lines[number - 1].rstrip(b"\r")
        if line.strip():
            out.append((number, line))
    return out


def oversized_rejection(span: Span, limit: int) -> Rejection:
    """A line blanked at read time for being over the cap, as a bounded record."""
    return Rejection(span.line, INGEST_OVERSIZED_EVENT,
                     f"line is {span.length} bytes; the limit is {limit}", b"",
                     digest=span.digest, length=span.length, offset=span.offset)


def screen_foreign(src: SourceText, plan: ReadPlan,
                   max_event_bytes: int) -> tuple[bytes, list[Rejection]]:
    """The text an importer gets: the planned lines, with lines that must not enter the log
    (oversized, lossy JSON, too deep) blanked here and parked by this edge, so every format
    gets the same rules. Malformed lines are left to the importer, which parks them."""
    kept: list[bytes] = []
    parked: list[Rejection] = []
    for number, line in enumerate(src.text.split(b"\n")[:plan.last_line], start=1):
        span = src.oversized.get(number)
        if span is not None:
            parked.append(oversized_rejection(span, max_event_bytes))
            kept.append(b"")
            continue
        if line.strip():
            try:
                loads_lossless(line.rstrip(b"\r"))
            except InputRejected as exc:
                if exc.code in (INGEST_LOSSY_JSON, INGEST_TOO_DEEP):
                    parked.append(Rejection(number, exc.code, exc.message, line))
                    kept.append(b"")
                    continue
        kept.append(line)
    body = b"\n".join(kept)
    return (body + b"\n" if kept and plan.terminated else body), parked


def whole_file_rejection(path: Path, code: str, reason: str, max_bytes: int, *,
                         stopped_at: int | None = None) -> Rejection:
    """A whole source file as one rejected record: its bytes as on disk when they fit
    `max_bytes`, else a bounded record (length and digest of the file; the bytes stay in the
    source)."""
    size = path.stat().st_size
    where = f" (reading stopped at decompressed offset {stopped_at})" \
        if stopped_at is not None else ""
    if size <= max_bytes:
        return Rejection(0, code, reason + where, path.read_bytes())
    digest = span_hasher()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return Rejection(0, code, f"{reason}{where} (file of {size} bytes kept as a bounded record: "
                     "length and digest)", b"", digest=digest.hexdigest(), length=size, offset=0)


def _is_whole_object(tail: bytes) -> bool:
    try:
        return isinstance(loads(tail), dict)
    except JSONDecodeError:
        return False


def checked_import(imported: Any) -> list[ImportedSession]:
    """An importer's result, checked for the shape the edge relies on (else TypeError, which
    the caller treats as the importer failing). Events must also be lossless JSON values."""
    out = []
    for item in imported:
        header, events, rejections = item
        if not isinstance(header, dict) or not isinstance(header.get("id"), str):
            raise TypeError("an imported session has no header with a string id")
        if not isinstance(events, list) or not all(
                isinstance(e, dict) and isinstance(e.get("seq"), int)
                and isinstance(e.get("type"), str) for e in events):
            raise TypeError("imported events must be objects with an integer seq and a type")
        if not all(isinstance(r, Rejection) for r in rejections):
            raise TypeError("importer rejections must be Rejection records")
        check_value(header)
        for event in events:
            dumps(event)  # the store must be able to write it (e.g. not nested too deep)
        out.append(ImportedSession(header, events, list(rejections)))
    return out

