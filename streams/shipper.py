"""Ingest edge, fleet: the shipper behind `recall watch` with RECALL_BROKER — publishes the new
complete lines of agents' log files to `<p>.events` (keyed by session id, header first), one
watcher per agent host.

What was published is recorded per file in `<data_dir>/shipper.json` after the broker acked it
(so a kill re-publishes at most the last batch; the fold drops exact duplicates). Each batch
holds the data dir's writer lock (streams/lock.py) and rereads that record when another process
wrote since, so `recall hook` over Kafka and a running watcher share it: each publishes only
what the other has not. Native logs
continue from the consumed offset after checking the prefix hash (a changed prefix is reported
as rewritten and nothing is published); foreign formats are re-imported whole (the importers are
deterministic) and only the events beyond what each session already published go out. An
unterminated last line waits for its newline. Records a file format cannot map are published
to `<p>.dead-letter` by the client, like `recall ingest`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from projections.logformat import Rejection
from streams.atomic import replace_file
from streams.codec import encode_event_value
from streams.ingest import IngestReport, source_key
from streams.kafka.query import run_sync
from streams.lock import WriterLock
from streams.sourcefile import read_source
from streams.store import ensure_private_dir

STATE_FILE = "shipper.json"


class Shipper:
    """Publishes what is new in each file through a `KafkaBackend`'s producer."""

    def __init__(self, backend: Any, data_dir: Path, *, max_event_bytes: int,
                 max_file_bytes: int, importers: Mapping[str, Any],
                 detect: Callable[[Path, bytes], str | None] | None,
                 lock_timeout_s: float = 30.0) -> None:
        self.backend = backend
        self.path = data_dir / STATE_FILE
        ensure_private_dir(data_dir)
        self.lock = WriterLock(data_dir, timeout_s=lock_timeout_s)
        self.max_event_bytes = max_event_bytes
        self.max_file_bytes = max_file_bytes
        self.importers = dict(importers)
        self.detect = detect
        #: Read from shipper.json under the lock: the first hold always reads it (WriterLock
        #: reports a first hold as changed), later ones when another process wrote.
        self.state: dict[str, dict[str, Any]] = {}

    def _load(self) -> None:
        self.state = {}
        if self.path.exists():
            with contextlib.suppress(orjson.JSONDecodeError):
                loaded = orjson.loads(self.path.read_bytes())
                if isinstance(loaded, dict):
                    self.state = loaded

    def ingest(self, paths: Sequence[Path]) -> IngestReport:
        with self.lock.hold(lambda changed: self._load() if changed else None):
            return self._ingest(paths)

    def _ingest(self, paths: Sequence[Path]) -> IngestReport:
        report = IngestReport()
        for path in paths:
            report.files += 1
            try:
                self._ship(path, report)
            except OSError as exc:
                report.unreadable.append({"source": source_key(path),
                                          "error": f"{type(exc).__name__}: {exc}"})
        replace_file(self.path, orjson.dumps(self.state, option=orjson.OPT_SORT_KEYS))
        return report

    def _ship(self, path: Path, report: IngestReport) -> None:
        key = source_key(path)
        stat = path.stat()
        seen = self.state.get(key, {})
        if seen.get("size") == stat.st_size and seen.get("mtime") == stat.st_mtime_ns:
            report.unchanged += 1
            return
        consumed = int(seen.get("consumed", 0))
        src = read_source(path, max_line=self.max_event_bytes, max_total=self.max_file_bytes,
                          checkpoint=consumed or None)
        stamp = {"size": stat.st_size, "mtime": stat.st_mtime_ns}
        kind = seen.get("format") or (self.detect(path, src.text[:65536]) if self.detect
                                      else None) or "dsh"
        if kind in self.importers:
            records, rejections = self._foreign(key, src.text, kind, seen, report)
            entry: dict[str, Any] = {**seen, **stamp, "format": kind}
        else:
            if consumed and src.checkpoint_digest != seen.get("prefixHash"):
                report.rewritten.append(key)
                self.state[key] = {**seen, **stamp}
                return
            records = self._native(src.text[consumed:src.complete_end], seen, report)
            rejections = []
            entry = {**seen, **stamp, "format": kind, "consumed": src.complete_end,
                     "prefixHash": src.complete_digest}
            if src.tail:
                report.pending += 1
                report.pending_sources.append(key)
        if records or rejections:
            run_sync(self.backend.loop, self.backend._publish(
                self.backend._producer_started(), records, str(path), rejections),
                self.backend.settings.request_timeout_s * 4)
        report.count_rejections(rejections)
        self.state[key] = entry

    def _native(self, new: bytes, seen: dict[str, Any],
                report: IngestReport) -> list[tuple[bytes, bytes]]:
        lines = [line.rstrip(b"\r") for line in new.split(b"\n") if line.strip()]
        session = seen.get("sessionId")
        headers = 0
        if session is None and lines:
            with contextlib.suppress(orjson.JSONDecodeError):
                head = orjson.loads(lines[0])
                if isinstance(head, dict) and isinstance(head.get("id"), str):
                    session = head["id"]
                    headers = 1
            seen["sessionId"] = session  # a bad header still goes out, to be parked
        if session is not None:
            report.sessions.add(str(session))
        report.lines += len(lines)
        report.headers += headers
        report.events_added += len(lines) - headers  # published; the fold agent judges them
        report.lines_accepted += len(lines) - headers
        key = str(session).encode("utf-8") if session is not None else b""
        return [(key, line) for line in lines]

    def _foreign(self, source: str, text: bytes, kind: str, seen: dict[str, Any],
                 report: IngestReport) -> tuple[list[tuple[bytes, bytes]], list[Rejection]]:
        published: dict[str, int] = dict(seen.get("published") or {})
        records: list[tuple[bytes, bytes]] = []
        rejections: list[Rejection] = []
        importer = self.importers[kind]
        resume = getattr(importer, "resume", None)
        done_lines = int(seen.get("lines", 0))
        if resume is not None:
            # An importer that groups writes (Aider) maps what is new after the lines shipped
            # before; a partial last line waits for its newline.
            text = text[:text.rfind(b"\n") + 1]
        imported = (resume(text, source, done_lines, lambda sid: published.get(sid, -1) + 1)
                    if resume is not None and done_lines > 0 else importer(text, source))
        for header, events, rejected in imported:
            sid = str(header["id"])
            key = sid.encode("utf-8")
            done = published.get(sid, -1)  # -1: not even the header went out yet
            if done < 0:
                records.append((key, encode_event_value(header)))
                report.headers += 1
            fresh = [e for e in events if int(e["seq"]) > done]
            records.extend((key, encode_event_value(e)) for e in fresh)
            report.events_added += len(fresh)
            report.sessions.add(sid)
            published[sid] = max([done, *(int(e["seq"]) for e in fresh)])
            rejections.extend(r for r in rejected if r.line > int(seen.get("lines", 0)))
        seen["published"] = published
        seen["lines"] = text.count(b"\n")
        return records, rejections
