"""Embedded runtime, ingest edge: files and directories of session logs → the local store.

Incremental by design: a source whose size and mtime are unchanged costs a stat; a grown native
file is read from where the last ingest stopped (after checking the hash of what was consumed);
a rewritten or truncated file is reported, never merged. Foreign formats are re-imported whole
(the importers are deterministic) and the store keeps only the events it has not seen.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_REWRITTEN_SOURCE,
    INGEST_UNSUPPORTED_FORMAT,
    InputRejected,
)
from projections.fold import Step, SurfaceState
from projections.logformat import LogBuilder, Rejection, decompress, split_lines
from streams.store import DeadLetters, SessionStore, StoredSession, open_private

LOG_SUFFIXES = (".jsonl", ".jsonl.zst", ".jsonl.zstd")

#: Called after events were appended to the store: (header, state before, new events, and
#: their fold steps, so the index need not fold them again).
OnAppend = Callable[[Mapping[str, Any], SurfaceState, Sequence[Mapping[str, Any]],
                     Sequence[Step]], None]
#: An importer for a foreign format: bytes → [(header, events, rejections)].
Importer = Callable[[bytes, str], list[tuple[dict[str, Any], list[dict[str, Any]], list[Rejection]]]]


@dataclass(slots=True)
class IngestReport:
    """Counts of one ingest run; `lines == headers + linesAccepted + duplicateLines + rejected`."""

    files: int = 0
    unchanged: int = 0
    lines: int = 0
    headers: int = 0
    lines_accepted: int = 0
    duplicate_lines: int = 0
    events_added: int = 0
    rejected: int = 0
    sessions: set[str] = field(default_factory=set)
    rewritten: list[str] = field(default_factory=list)
    rejected_by_code: dict[str, int] = field(default_factory=dict)

    def count_rejections(self, rejections: Sequence[Rejection]) -> None:
        self.rejected += len(rejections)
        for r in rejections:
            self.rejected_by_code[r.code] = self.rejected_by_code.get(r.code, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "unchanged": self.unchanged, "lines": self.lines,
                "headers": self.headers, "linesAccepted": self.lines_accepted,
                "duplicateLines": self.duplicate_lines, "eventsAdded": self.events_added,
                "rejected": self.rejected, "sessions": len(self.sessions),
                "rewritten": list(self.rewritten), "rejectedByCode": dict(self.rejected_by_code)}


def iter_log_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Files as given, and every log file below given directories, in a stable order: JSONL
    logs, and the files a supported agent writes under other names (the importer registry's)."""
    from streams.importers.detect import claims_log_name

    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and (child.name.endswith(LOG_SUFFIXES)
                                        or claims_log_name(child)):
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
        self.duplicates = 0

    def accept_header(self, header: dict[str, Any]) -> None:
        self.stored = self.store.check_header(header)
        if self.stored is not None:
            self.log.state = self.stored.state

    def feed_event(self, event: dict[str, Any]) -> None:
        base = self.stored.state.next_seq if self.stored else 0
        if int(event.get("seq", -1)) < base:
            self.store.classify(self.stored, event)  # raises on a conflicting duplicate
            self.duplicates += 1
            return
        super().feed_event(event)


class Ingestor:
    """Moves sources into the store, parks rejections, and tells `on_append` what is new."""

    def __init__(self, data_dir: Path, store: SessionStore, dead_letters: DeadLetters,
                 on_append: OnAppend, *, max_event_bytes: int,
                 importers: Mapping[str, Importer] | None = None,
                 detect: Callable[[Path, bytes], str | None] | None = None) -> None:
        self.registry_path = data_dir / "sources.json"
        self.store = store
        self.dead_letters = dead_letters
        self.on_append = on_append
        self.max_event_bytes = max_event_bytes
        self.importers = dict(importers or {})
        self.detect = detect
        self.registry: dict[str, dict[str, Any]] = (
            orjson.loads(self.registry_path.read_bytes()) if self.registry_path.exists() else {})

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        report = IngestReport()
        files = list(iter_log_files(paths))
        for done, path in enumerate(files, start=1):
            report.files += 1
            self._ingest_file(path, fmt, report)
            if progress is not None:
                progress(done, len(files))
        self._save_registry()
        return report

    def _ingest_file(self, path: Path, fmt: str, report: IngestReport) -> None:
        key = str(path.resolve())
        stat = path.stat()
        seen = self.registry.get(key)
        if seen and seen["size"] == stat.st_size and seen["mtime"] == stat.st_mtime_ns:
            report.unchanged += 1
            return
        raw = path.read_bytes()
        try:
            text = decompress(raw)
        except Exception as exc:
            rejection = Rejection(0, "INGEST_MALFORMED_JSON", f"cannot decompress: {exc}", raw)
            self._park(key, [rejection], None, report)
            return
        kind = fmt if fmt != "auto" else self._detect(path, text)
        if kind == "dsh":
            self._ingest_native(key, text, seen, report)
        elif kind in self.importers:
            self._ingest_foreign(key, text, seen, kind, report)
        else:
            self._park(key, [Rejection(0, INGEST_UNSUPPORTED_FORMAT,
                                       f"no importer for format {kind!r}", text[:4096])], None,
                       report)
        self.registry[key] = {**self.registry.get(key, {}), "size": stat.st_size,
                              "mtime": stat.st_mtime_ns, "format": kind}

    def _detect(self, path: Path, text: bytes) -> str:
        if self.detect is not None:
            found = self.detect(path, text[:65536])
            if found:
                return found
        first = text.split(b"\n", 1)[0]
        try:
            head = orjson.loads(first)
        except orjson.JSONDecodeError:
            return "unknown"
        return "dsh" if isinstance(head, dict) and head.get("type") == "session" else "unknown"

    def _complete_prefix(self, key: str, text: bytes, seen: dict[str, Any] | None,
                         report: IngestReport) -> tuple[int, int] | None:
        """(start, end) of the new complete lines, or None when the source was rewritten.
        Only complete lines count: a partial last line may still be being written."""
        end = len(text) if text.endswith(b"\n") else text.rfind(b"\n") + 1
        if end == 0 and b"\n" not in text:
            end = len(text)  # a one-line file without newline: take it as complete
        start = 0
        if seen and seen.get("consumed"):
            consumed = int(seen["consumed"])
            if len(text) < consumed or _hash(text[:consumed]) != seen.get("prefixHash"):
                report.rewritten.append(key)
                self._park(key, [Rejection(0, INGEST_REWRITTEN_SOURCE,
                                           "the file changed before the point already ingested; "
                                           "it was not merged (re-ingest it under a new session "
                                           "or restore the original)", b"")], None, report)
                return None
            start = consumed
        return start, end

    def _ingest_native(self, key: str, text: bytes, seen: dict[str, Any] | None,
                       report: IngestReport) -> None:
        span = self._complete_prefix(key, text, seen, report)
        if span is None:
            return
        start, end = span
        first_line = 1
        header: dict[str, Any] | None = None
        stored: StoredSession | None = None
        blocked = False
        if seen and start:
            first_line = int(seen.get("lines", 0)) + 1
            if seen.get("sessionId") is not None:
                stored = self.store.load(str(seen["sessionId"]))
                header = stored.header if stored else None
            blocked = bool(seen.get("blocked"))
        feed = _StoreFeed(self.store, max_event_bytes=self.max_event_bytes, header=header,
                          stored=stored)
        if blocked:
            feed.blocked = True
        lines = 0
        for offset, line in split_lines(text[start:end]):
            lines += 1
            rejected, added, dups = len(feed.log.rejections), len(feed.log.events), feed.duplicates
            had_header = feed.log.header is not None
            feed.feed_line(first_line + offset - 1, line)
            if len(feed.log.rejections) > rejected:
                continue
            if not had_header and feed.log.header is not None:
                report.headers += 1
            elif len(feed.log.events) > added:
                report.lines_accepted += 1
            elif feed.duplicates > dups:
                report.duplicate_lines += 1
        report.lines += lines
        sid = str(feed.log.header["id"]) if feed.log.header else None
        if feed.log.header is not None and feed.log.events:
            before = feed.stored.state if feed.stored else SurfaceState()
            self.store.append(feed.log.header, feed.log.events, feed.log.state)
            self.on_append(feed.log.header, before, feed.log.events, feed.log.steps)
        if sid is not None:
            report.sessions.add(sid)
        report.events_added += len(feed.log.events)
        self._park(key, feed.log.rejections, sid, report)
        total_lines = first_line - 1 + text[start:end].count(b"\n")
        self.registry[key] = {"consumed": end, "prefixHash": _hash(text[:end]),
                              "lines": total_lines, "sessionId": sid,
                              "blocked": feed.blocked}

    def _ingest_foreign(self, key: str, text: bytes, seen: dict[str, Any] | None, kind: str,
                        report: IngestReport) -> None:
        """Foreign importers are deterministic and need no look-ahead, so a grown file re-imports
        whole and the store keeps only events it has not seen (exact duplicates skip). A
        whole-document format (rewritten whole as it grows) is judged on its events instead of
        its bytes: the importer says which events are new (`extend`)."""
        importer = self.importers[kind]
        # Optional on an importer: `whole_document` and `extend(stored, fresh) -> new events`.
        extend: Callable[[list[dict[str, Any]], list[dict[str, Any]]], list[dict[str, Any]]] \
            | None = getattr(importer, "extend", None) \
            if getattr(importer, "whole_document", False) is True else None
        end = len(text)
        if extend is None:
            span = self._complete_prefix(key, text, seen, report)
            if span is None:
                return
            end = span[1]
        settle = getattr(importer, "settle_header", None)
        for header, events, rejections in importer(text[:end], key):
            sid = str(header["id"])
            report.sessions.add(sid)
            if settle is not None:  # a cwd recovered late keeps the first observation's header
                known = self.store.load(sid)
                header = settle(known.header if known else None, header)
            try:
                stored = self.store.check_header(header)
            except InputRejected as exc:
                self._park(key, [Rejection(0, exc.code, exc.message, orjson.dumps(header))],
                           sid, report)
                continue
            if extend is not None and stored is not None:
                events = extend(self.store.read(sid)[1], events)
            feed = _StoreFeed(self.store, max_event_bytes=self.max_event_bytes, header=header,
                              stored=stored)
            before = feed.log.state
            parked = list(rejections)
            for i, event in enumerate(events):
                try:
                    feed.feed_event(event)
                except InputRejected as exc:
                    if exc.code == INGEST_DUPLICATE_CONFLICT:
                        # What was imported before is not a prefix of this import: the file was
                        # rewritten, or an older importer version mapped it. Report once.
                        report.rewritten.append(key)
                        parked.append(Rejection(0, INGEST_REWRITTEN_SOURCE, (
                            f"session {sid}: seq {event['seq']} imported before differs from a "
                            "new import of this file (the file was rewritten, or an older "
                            "importer version imported it); not merged: see "
                            "streams/importers/MAPPING.md, Re-importing"), b""))
                        break
                    parked.append(Rejection(i, exc.code, exc.message, orjson.dumps(event)))
                    parked.extend(Rejection(j, "INGEST_AFTER_REJECTED",
                                            "an earlier event of this session was rejected",
                                            orjson.dumps(e))
                                  for j, e in enumerate(events[i + 1:], start=i + 1))
                    break
            report.headers += 1 if stored is None else 0
            report.events_added += len(feed.log.events)
            report.duplicate_lines += feed.duplicates
            if feed.log.events:
                self.store.append(header, feed.log.events, feed.log.state)
                self.on_append(header, before, feed.log.events, feed.log.steps)
            self._park(key, parked, sid, report)
        self.registry[key] = {"consumed": end, "prefixHash": _hash(text[:end])}

    def _park(self, source: str, rejections: Sequence[Rejection], session_id: str | None,
              report: IngestReport) -> None:
        report.count_rejections(rejections)
        self.dead_letters.park(source, rejections, session_id)

    def _save_registry(self) -> None:
        tmp = self.registry_path.with_suffix(".tmp")
        with open_private(tmp, "wb") as f:
            f.write(orjson.dumps(self.registry, option=orjson.OPT_SORT_KEYS))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.registry_path)


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
