"""Entry point for Kafka callers: `Recall.connect` — requests to query workers, ingest by
publishing log lines to `<p>.events` (keyed by session id, header first, packed into segments)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from projections.errors import RecallError
from projections.logformat import Rejection, decompress, split_lines
from streams.codec import DeadLetter, dead_letter_key, encode_dead_letter, encode_event_value
from streams.ingest import IngestReport, iter_log_files
from streams.kafka import seam
from streams.kafka.producer import EventProducer
from streams.kafka.query import run_sync
from streams.kafka.rpc import Requester
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers, ensure_topics


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
        # (which appends) is sent once.
        send = (self.requester.request if op == "prepare_reference"
                else self.requester.request_retrying)
        return run_sync(self.loop, send(self.topics.requests, op, dict(args), deadline=deadline),
                        self.settings.request_timeout_s + 5)

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
        """Publish every line (native) or imported event (foreign) of every file. The fold
        agent validates, deduplicates and parks bad records, so publishing is all we do here;
        `eventsAdded` counts records published, importer rejections go to `<p>.dead-letter`."""
        report = IngestReport()
        files = list(iter_log_files(paths))
        producer = self._producer_started()
        for done, path in enumerate(files, start=1):
            report.files += 1
            text = decompress(path.read_bytes())
            kind = fmt if fmt != "auto" else (self.detect(path, text[:65536]) if self.detect
                                              else "dsh") or "dsh"
            if kind in self.importers:
                records, rejections = self._imported(str(path), text, kind, report)
            else:
                records, rejections = self._native(text, report)
            run_sync(self.loop, self._publish(producer, records, str(path), rejections),
                     self.settings.request_timeout_s * 4)
            report.count_rejections(rejections)
            if progress is not None:
                progress(done, len(files))
        return report

    def _native(self, text: bytes,
                report: IngestReport) -> tuple[list[tuple[str, list[bytes]]], list[Rejection]]:
        lines = [line for _, line in split_lines(text)]
        key = b""
        with contextlib.suppress(ValueError):  # a bad header still goes out, to be parked
            head = orjson.loads(lines[0]) if lines else None
            key = str(head.get("id", "")).encode("utf-8") if isinstance(head, dict) else b""
        report.lines += len(lines)
        report.headers += 1 if lines else 0
        report.events_added += max(0, len(lines) - 1)
        report.lines_accepted += max(0, len(lines) - 1)  # published; the fold agent judges them
        if key:
            report.sessions.add(key.decode("utf-8"))
        return [(key.decode("utf-8", "replace"), lines)], []

    def _imported(self, source: str, text: bytes, kind: str,
                  report: IngestReport) -> tuple[list[tuple[str, list[bytes]]], list[Rejection]]:
        sessions: list[tuple[str, list[bytes]]] = []
        rejections: list[Rejection] = []
        for header, events, rejected in self.importers[kind](text, source):
            report.sessions.add(str(header["id"]))
            report.headers += 1
            sessions.append((str(header["id"]), [encode_event_value(header),
                                                 *(encode_event_value(e) for e in events)]))
            report.events_added += len(events)
            rejections.extend(rejected)
        return sessions, rejections

    async def _publish(self, producer: EventProducer, sessions: list[tuple[str, list[bytes]]],
                       source: str, rejections: Sequence[Rejection]) -> None:
        """Each session's lines as segments (a session without a readable id goes out under an
        empty key, to be parked by the fold); then the importer's rejections; then the acks."""
        for session_id, lines in sessions:
            await producer.send_lines(session_id, lines)
        futures = []
        for r in rejections:
            letter = DeadLetter.of(topic=f"import:{source}", partition=0, offset=r.line, key=None,
                                   value=r.raw, code=r.code, reason=r.reason)
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
            time.sleep(0.5)
        result["removed"] = []  # retired generations are deleted by the workers, later
        digest = self.call("index_digest", {})
        result.setdefault("eventsIndexed", digest.get("events"))
        return {**result, **digest}

    def close(self) -> None:
        if self._producer is not None:
            run_sync(self.loop, self._producer.stop(), 10)
        run_sync(self.loop, self.requester.stop(), 10)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
