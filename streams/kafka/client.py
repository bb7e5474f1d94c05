"""Entry point for Kafka callers: `Recall.connect` — requests to query workers, ingest by
publishing log lines to `<p>.events` (keyed by session id, header first, packed into segments)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from projections.errors import (
    INGEST_CORRUPT_COMPRESSION,
    INGEST_FILE_TOO_LARGE,
    INGEST_IMPORTER_FAILED,
    INGEST_UNSUPPORTED_FORMAT,
    RecallError,
)
from projections.logformat import Rejection
from streams.codec import DeadLetter, dead_letter_key, encode_dead_letter, encode_event_value
from streams.errorlog import log_exception
from streams.ingest import (
    IngestReport,
    ReadPlan,
    checked_import,
    detect_format,
    iter_log_files,
    oversized_rejection,
    plan_reading,
    planned_lines,
    screen_foreign,
    source_key,
    whole_file_rejection,
)
from streams.kafka import seam
from streams.kafka.producer import EventProducer
from streams.kafka.query import run_sync
from streams.kafka.rpc import Requester
from streams.settings import Settings
from streams.sourcefile import SourceText, read_source
from streams.topics import Topics, bootstrap_servers, ensure_topics

#: Largest file parked whole with its bytes in a dead letter (base64 in a JSON record, well under
#: brokers' 1 MB default record limit); a larger one is parked as a bounded record.
DEAD_LETTER_FILE_BYTES = 512 * 1024


class KafkaBackend:
    """The facade's backend over Kafka: one background event loop, one reply partition."""

    def __init__(self, settings: Settings, *, importers: Mapping[str, Any] | None = None,
                 detect: Callable[[Path, bytes], str | None] | None = None) -> None:
        seam.install()  # the client's reply consumer waits on empty fetches too
        self.settings = settings
        self.topics = Topics.of(settings)
        self.bootstrap = bootstrap_servers(str(settings.broker))
        self.importers = dict(importers or {})
        self.detect = detect
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="recall-kafka",
                                       daemon=True)
        self.thread.start()
        self.requester = Requester(self.bootstrap, self.topics.replies, settings.shards)
        timeout = settings.request_timeout_s
        try:
            # Only the shared topics: a client must not re-create a retired generation's ones.
            run_sync(self.loop, ensure_topics(self.bootstrap, self.topics,
                                              names=self.topics.shared()), timeout)
            run_sync(self.loop, self.requester.start(), timeout)
        except BaseException:
            self._stop_loop()
            raise
        self._producer: EventProducer | None = None

    def call(self, op: str, args: Mapping[str, Any]) -> Any:
        deadline = time.time() + self.settings.request_timeout_s
        # Reads are idempotent and re-sent if a rebalancing worker skipped them; a reference
        # or an append (which append) is sent once.
        send = (self.requester.request if op in ("prepare_reference", "append_events")
                else self.requester.request_retrying)
        result = run_sync(self.loop, send(self.topics.requests, op, dict(args),
                                          deadline=deadline),
                          self.settings.request_timeout_s + 5)
        if op == "append_events" and result.get("seqs"):
            # Read your writes: the worker numbers an append after the indexed log, so the next
            # append must not start before this one is indexed.
            self._wait_visible(str(args["sessionId"]), int(result["seqs"][-1]), deadline)
        return result

    # --- sessions recall writes ---------------------------------------------------------------

    def create_session(self, header: Mapping[str, Any]) -> dict[str, Any]:
        """Publish the header of a session recall writes (`writer: recall`) and wait until
        the query workers read it."""
        from streams.owned import SessionExists

        session_id = str(header["id"])
        deadline = time.time() + self.settings.request_timeout_s
        if self.call("filter_sessions", {"filters": [{"kind": "id", "values": [session_id]}]}):
            raise SessionExists(f"session {session_id!r} already exists")
        record = (session_id.encode("utf-8"), encode_event_value(dict(header)))
        run_sync(self.loop, self._publish(self._producer_started(), [record], "create", []),
                 self.settings.request_timeout_s)
        self._wait_visible(session_id, None, deadline)
        return dict(header)

    def _wait_visible(self, session_id: str, seq: int | None, deadline: float) -> None:
        """Until the session (and its event `seq`) can be read from the index."""
        while True:
            with contextlib.suppress(RecallError):
                if seq is None:
                    if self.call("filter_sessions",
                                 {"filters": [{"kind": "id", "values": [session_id]}]}):
                        return
                else:
                    self.call("read_event", {"sessionId": session_id, "seq": seq})
                    return
            if time.time() > deadline:
                raise RecallError(f"session {session_id!r} was published but is not readable "
                                  "yet", code="RECALL_REQUEST_TIMEOUT",
                                  hint="check that `recall worker` processes are running")
            time.sleep(0.05)

    # --- ingest: publish ----------------------------------------------------------------------

    def _producer_started(self) -> EventProducer:
        if self._producer is None:
            async def start() -> EventProducer:
                # aiokafka objects must be created on the loop that runs them.
                producer = EventProducer(self.bootstrap, self.topics.events)
                await producer.start()
                return producer

            self._producer = run_sync(self.loop, start(), self.settings.request_timeout_s)
        return self._producer

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        """Publish every file's lines (native) or imported events (foreign) to the events topic.

        Files are read at the same edge as the embedded ingest (streams/ingest.py): under the
        caps (streams/sourcefile.py), an unterminated last line pending, foreign lines screened
        (oversized, lossy, too deep) before the importer, an importer that raises parks its
        file whole (INGEST_IMPORTER_FAILED), a file that cannot be read at all is parked whole.
        The fold validates, deduplicates and parks the lines it rejects, so `eventsAdded`
        counts what was published. Unlike the embedded ingest there is no registry of sources:
        every run publishes whole files again and the fold skips exact duplicates (what a
        whole-document importer would merge with the stored session, the fold judges as is)."""
        report = IngestReport()
        files = list(iter_log_files(paths))
        producer = self._producer_started()
        for done, path in enumerate(files, start=1):
            report.files += 1
            try:
                records, rejections = self._read(path, fmt, report)
            except OSError as exc:  # vanished or unreadable: say so and go on with the others
                report.unreadable.append({"source": source_key(path),
                                          "error": f"{type(exc).__name__}: {exc.strerror or exc}"})
            else:
                run_sync(self.loop, self._publish(producer, records, source_key(path), rejections),
                         self.settings.request_timeout_s * 4)
                report.count_rejections(rejections)
            if progress is not None:
                progress(done, len(files))
        return report

    def _read(self, path: Path, fmt: str,
              report: IngestReport) -> tuple[list[tuple[bytes, bytes]], list[Rejection]]:
        """One file → the records to publish (session id, line) and the rejections this edge
        parks itself."""
        key = source_key(path)
        limit = self.settings.max_event_bytes

        def whole_file(code: str, reason: str, stopped_at: int | None = None) -> Rejection:
            report.lines += 1
            report.parked_lines += 1
            return whole_file_rejection(path, code, reason, min(limit, DEAD_LETTER_FILE_BYTES),
                                        stopped_at=stopped_at)

        src = read_source(path, max_line=limit, max_total=self.settings.max_file_bytes)
        broken = src.corrupt or ("the zstd stream ends inside a frame (truncated)"
                                 if src.truncated_frame else None)
        if src.complete_end == 0 and broken:
            return [], [whole_file(INGEST_CORRUPT_COMPRESSION,
                                   f"{broken}; no complete line could be decoded")]
        kind = fmt if fmt != "auto" else detect_format(path, src.text, self.detect)
        if kind != "dsh" and kind not in self.importers:
            return [], [whole_file(INGEST_UNSUPPORTED_FORMAT, f"no importer for format {kind!r} "
                                   "(kept whole: the file's bytes)")]
        whole = kind != "dsh" and getattr(self.importers[kind], "whole_document", False) is True
        plan = plan_reading(src, None, whole=whole)
        if kind == "dsh":
            records, rejections = self._native(src, plan, report)
        else:
            imported = self._imported(key, src, plan, kind, report)
            if isinstance(imported, BaseException):
                exc = imported
                return [], [whole_file(INGEST_IMPORTER_FAILED, (
                    f"the {kind} importer failed ({type(exc).__name__}: {str(exc)[:200]}); "
                    "kept whole, retried on the next ingest"))]
            records, rejections = imported
        if src.over_limit:
            rejections.append(whole_file(
                INGEST_FILE_TOO_LARGE, f"reading stopped after {self.settings.max_file_bytes} "
                "decompressed bytes (RECALL_MAX_FILE_BYTES); lines before that point were "
                "ingested", src.complete_end))
        elif broken:
            rejections.append(whole_file(INGEST_CORRUPT_COMPRESSION, f"{broken}; the complete "
                                         "lines before that point were ingested",
                                         src.complete_end))
        if plan.pending:
            report.pending += 1
            report.lines += 1
            report.pending_sources.append(key)
        return records, rejections

    def _native(self, src: SourceText, plan: ReadPlan,
                report: IngestReport) -> tuple[list[tuple[bytes, bytes]], list[Rejection]]:
        """Every planned line under the header's session id (a bad header still goes out,
        under an empty key, to be parked by the fold); a line over the cap is parked here as a
        bounded record (never read whole; the fold then parks the session's later lines as
        INGEST_SEQ_GAP)."""
        lines = planned_lines(src, plan)
        key = b""
        if lines and lines[0][0] == 1 and lines[0][1] is not None:
            with contextlib.suppress(ValueError):
                head = orjson.loads(lines[0][1])
                if isinstance(head, dict) and isinstance(head.get("id"), str):
                    key = head["id"].encode("utf-8")
                    report.sessions.add(head["id"])
        records: list[tuple[bytes, bytes]] = []
        rejections: list[Rejection] = []
        for number, line in lines:
            report.lines += 1
            if line is None:
                rejections.append(oversized_rejection(src.oversized[number],
                                                      self.settings.max_event_bytes))
                report.parked_lines += 1
                continue
            records.append((key, line))
            if number == 1:
                report.headers += 1
            else:  # published; the fold judges it
                report.lines_accepted += 1
                report.events_added += 1
        return records, rejections

    def _imported(self, source: str, src: SourceText, plan: ReadPlan, kind: str,
                  report: IngestReport,
                  ) -> tuple[list[tuple[bytes, bytes]], list[Rejection]] | BaseException:
        """The importer's sessions (header, then events) as records, with the lines the edge
        screened out and the importer's rejections; the exception if the importer failed."""
        text, screened = screen_foreign(src, plan, self.settings.max_event_bytes)
        try:
            imported = checked_import(self.importers[kind](text, source))
        except Exception as exc:  # an importer bug must not end the run or lose the file
            log_exception(exc, self.settings.data_dir,
                          context=f"importer {kind} failed on {source}")
            return exc
        records: list[tuple[bytes, bytes]] = []
        rejections: list[Rejection] = []
        for header, events, rejected in imported:
            sid = str(header["id"])
            report.sessions.add(sid)
            key = sid.encode("utf-8")
            records.append((key, encode_event_value(header)))
            records.extend((key, encode_event_value(e)) for e in events)
            report.events_added += len(events)
            rejections.extend(rejected)
        # the same line accounting as the embedded edge: a line taken is parked or imported
        taken = {n for n, _ in planned_lines(src, plan)}
        parked_now = len(taken & {r.line for r in (*rejections, *screened)})
        report.lines += len(taken)
        report.parked_lines += parked_now
        report.lines_accepted += len(taken) - parked_now
        return records, [*rejections, *screened]

    async def _publish(self, producer: EventProducer, records: Sequence[tuple[bytes, bytes]],
                       source: str, rejections: Sequence[Rejection]) -> None:
        """Records (session id, line) in order, each session's consecutive lines packed into
        segments (a session without a readable id goes out under an empty key, to be parked by
        the fold); then the rejections; then the acks."""
        for session, run in itertools.groupby(records, key=lambda record: record[0]):
            await producer.send_lines(session.decode("utf-8", "replace"),
                                      [line for _, line in run])
        futures = []
        for r in rejections:
            reason = r.reason if not r.bounded else (
                f"{r.reason} (bounded record: offset {r.offset}, length {r.length}, blake2b-256 "
                f"{r.digest}; the bytes stay in the source)")
            letter = DeadLetter.of(topic=f"import:{source}", partition=0, offset=r.line, key=None,
                                   value=None if r.bounded else r.raw, code=r.code, reason=reason)
            futures.append(await producer.producer.send(
                self.topics.dead_letter, encode_dead_letter(letter), key=dead_letter_key(letter)))
        await producer.flush()
        for future in futures:
            await future

    # --- jobs ---------------------------------------------------------------------------------

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Build the next generation beside the live one, swap, and wait until the query
        workers serve it (see streams.kafka.rebuild)."""
        from streams.kafka import rebuild

        return self._job(rebuild.reindex, progress)

    def replay(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Rebuild all derived state from the earliest offsets into a fresh generation."""
        from streams.kafka import rebuild

        return self._job(rebuild.replay, progress)

    def _job(self, job: Callable[..., Any],
             progress: Callable[[int, int], None] | None) -> dict[str, Any]:
        # No deadline for the job itself: it raises STREAM_JOB_STALLED when the fleet stops
        # making progress, and Ctrl-C interrupts it (a rerun resumes).
        result: dict[str, Any] = asyncio.run_coroutine_threadsafe(
            job(self.settings, progress), self.loop).result()
        deadline = time.monotonic() + self.settings.job_stall_s
        while True:  # the workers restart into the new generation; wait until they serve it
            with contextlib.suppress(RecallError):
                if self.call("index_generation", {})["generation"] == result["generation"]:
                    break
            if time.monotonic() > deadline:
                raise RecallError(f"the query workers did not switch to {result['generation']}",
                                  code="STREAM_JOB_STALLED",
                                  hint="check that `recall worker` processes are running")
            time.sleep(0.1)  # each look is one request; the switch takes ~1 s
        result["removed"] = []  # retired generations are deleted by the workers, later
        digest = self.call("index_digest", {})
        result.setdefault("eventsIndexed", digest.get("events"))
        return {**result, **digest}

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every letter on the dead-letter topic, in the embedded file's record shape."""
        from streams.kafka.deadletters import read_dead_letters

        letters: list[dict[str, Any]] = run_sync(
            self.loop, read_dead_letters(self.bootstrap, self.topics),
            self.settings.request_timeout_s * 4)
        return letters

    def close(self) -> None:
        if self._producer is not None:
            run_sync(self.loop, self._producer.stop(), 10)
        run_sync(self.loop, self.requester.stop(), 10)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
