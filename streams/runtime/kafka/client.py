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

from projections.codec import loads
from projections.errors import (
    RecallError,
)
from projections.logformat import Rejection
from streams.core.settings import Settings
from streams.ingest.edge import SAVE_EVERY_FILES, IngestReport, iter_log_files
from streams.ingest.importers.registry import Importer
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
    oversized_rejection,
    park_whole,
    plan_file,
    planned_lines,
    reimport_conflict,
    source_key,
)
from streams.ingest.sourcefile import SourceText
from streams.runtime.kafka import seam
from streams.runtime.kafka.codec import (
    DeadLetter,
    dead_letter_key,
    encode_dead_letter,
    encode_event_value,
)
from streams.runtime.kafka.connection import bootstrap_of, client_options, explained
from streams.runtime.kafka.producer import EventProducer
from streams.runtime.kafka.query import run_sync
from streams.runtime.kafka.rpc import Requester
from streams.runtime.kafka.sent import SentFiles, fresh_records, target_of
from streams.runtime.kafka.topics import Topics, ensure_topics
from streams.runtime.kafka.workspaces import request_signer

#: How long the explicit substring index build waits for the shard owners: a build reads every
#: event of a shard once. Past it the owners go on building; running it again waits for them.
SUBSTRING_BUILD_WAIT_S = 3600.0
#: Largest file parked whole with its bytes in a dead letter (base64 in a JSON record, well under
#: brokers' 1 MB default record limit); a larger one is parked as a bounded record.
DEAD_LETTER_FILE_BYTES = 512 * 1024


class KafkaBackend:
    """The facade's backend over Kafka: one background event loop, one reply partition."""

    def __init__(self, settings: Settings, *, importers: Mapping[str, Importer] | None = None,
                 detect: Detect | None = None) -> None:
        seam.install()  # the client's reply consumer waits on empty fetches too
        self.settings = settings
        self.topics = Topics.of(settings)
        self.bootstrap = client_options(settings)
        self.importers = normalize_importers(importers)
        self.detect = detect
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="recall-kafka",
                                       daemon=True)
        self.thread.start()
        self.requester = Requester(self.bootstrap, self.topics.replies, settings.shards,
                                   signer=request_signer(settings))
        # Started on the first request: an agent host's principal may only produce events.
        self._requester_lock = threading.Lock()
        self._requester_up = False
        timeout = settings.request_timeout_s
        try:
            # Only the shared topics: a client must not re-create a retired generation's ones;
            # on a secured cluster the ones this principal may not see are the workers' to make.
            self._sync(ensure_topics(self.bootstrap, self.topics, names=self.topics.shared(),
                                     skip_unauthorized=True), timeout)
        except BaseException:
            self._stop_loop()
            raise
        self._producer: EventProducer | None = None
        #: What each file published (shipper.json), opened on the first ingest.
        self._sent: SentFiles | None = None
        self.target = target_of(bootstrap_of(self.bootstrap), settings.topic_prefix)

    def _sync(self, coro: Any, timeout: float) -> Any:
        """Run `coro` on the client's loop; a refused connection (authentication, TLS, a
        missing ACL) comes back as the STREAM_* error that says which."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except Exception as exc:
            future.cancel()  # a step still retrying (a topic it may not use) stops here
            raise run_sync(self.loop, explained(self.bootstrap, exc, self.topics.shared()),
                           30) from None

    def _requester_started(self) -> None:
        with self._requester_lock:
            if not self._requester_up:
                self._sync(self.requester.start(), self.settings.request_timeout_s)
                self._requester_up = True

    def call(self, op: str, args: Mapping[str, Any]) -> Any:
        deadline = time.time() + self.settings.request_timeout_s
        # Reads are idempotent and re-sent if a rebalancing worker skipped them; a reference
        # or an append (which append) is sent once.
        send = (self.requester.request if op in ("prepare_reference", "append_events")
                else self.requester.request_retrying)
        self._requester_started()
        result = self._sync(send(self.topics.requests, op, dict(args), deadline=deadline),
                            self.settings.request_timeout_s + 5)
        if op == "append_events" and result.get("seqs"):
            # Read your writes: the worker numbers an append after the indexed log, so the next
            # append must not start before this one is indexed.
            self._wait_visible(str(args["sessionId"]), int(result["seqs"][-1]), deadline)
        return result

    def build_substring_index(self) -> int:
        """The explicit substring index build (`recall index substring`): each shard owner
        builds its shard's (a write: with request keys, only a key for every workspace may
        ask). The documents added; searches never build it over Kafka."""
        wait = max(SUBSTRING_BUILD_WAIT_S, self.settings.request_timeout_s)
        self._requester_started()
        result = self._sync(self.requester.request_retrying(
            self.topics.requests, "build_substring_index", {}, deadline=time.time() + wait),
            wait + 5)
        return int(result["documentsAdded"])

    # --- sessions recall writes ---------------------------------------------------------------

    def create_session(self, header: Mapping[str, Any]) -> dict[str, Any]:
        """Publish the header of a session recall writes (`writer: recall`) and wait until
        the query workers read it."""
        from streams.service.owned import SessionExists

        session_id = str(header["id"])
        deadline = time.time() + self.settings.request_timeout_s
        if self.call("filter_sessions", {"filters": [{"kind": "id", "values": [session_id]}]}):
            raise SessionExists(f"session {session_id!r} already exists")
        record = (session_id.encode("utf-8"), encode_event_value(dict(header)))
        self._sync(self._publish(self._producer_started(), [record], "create", []),
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
                producer = EventProducer(self.bootstrap, self.topics.events,
                                         idempotent=self.settings.kafka_idempotent)
                await producer.start()
                return producer

            self._producer = self._sync(start(), self.settings.request_timeout_s)
        return self._producer

    def _sent_files(self) -> SentFiles:
        if self._sent is None:
            self._sent = SentFiles(Path(self.settings.data_dir),
                                   lock_timeout_s=self.settings.lock_timeout_s)
        return self._sent

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        """Publish what is new in every file — a native log's new lines, a foreign file's new
        imported events — to the events topic.

        Files are read at the same edge as the embedded ingest (streams/ingest/edge.py): under the
        caps (streams/ingest/sourcefile.py), an unterminated last line pending, foreign lines screened
        (oversized, lossy, too deep) before the importer, an importer that raises parks its
        file whole (INGEST_IMPORTER_FAILED), a file that cannot be read at all is parked whole.
        What each file published is kept in the data dir's `shipper.json` (streams/runtime/kafka/sent.py,
        under its writer lock, shared with `recall watch` and `recall hook` over Kafka): an
        unchanged file is not read, a grown one continues after what was sent (an importer's
        `resume`, or the events beyond those published), a changed prefix is reported as
        rewritten, as in the embedded ingest. The fold validates, deduplicates and parks the
        lines it rejects, so `eventsAdded` counts what was published."""
        report = IngestReport()
        files = list(iter_log_files(paths))
        producer = self._producer_started()
        sent = self._sent_files()
        with sent.hold() as state:
            for done, path in enumerate(files, start=1):
                report.files += 1
                key = source_key(path)
                try:
                    read = self._read(path, fmt, report, sent.seen(key, self.target))
                except OSError as exc:  # vanished or unreadable: say so and go on
                    report.unreadable.append({"source": key, "error":
                                              f"{type(exc).__name__}: {exc.strerror or exc}",
                                              "code": getattr(exc, "code", "RECALL_IO_ERROR")})
                else:
                    if read is not None:
                        records, rejections, entry = read
                        self._sync(self._publish(producer, records, key, rejections),
                                   self.settings.request_timeout_s * 4)
                        report.count_rejections(rejections)
                        if entry is not None:  # acked: remembered
                            state[key] = entry
                if done % SAVE_EVERY_FILES == 0:
                    sent.save()
                if progress is not None:
                    progress(done, len(files))
        return report

    def _read(self, path: Path, fmt: str, report: IngestReport, seen: dict[str, Any],
              ) -> tuple[list[tuple[bytes, bytes]], list[Rejection], dict[str, Any] | None] | None:
        """One file → the records to publish (session id, line), the rejections this edge
        parks itself, and the file's new entry (None: not remembered, retried next time);
        None when the file is unchanged since it was last published."""
        key = source_key(path)
        park_limit = min(self.settings.max_event_bytes, DEAD_LETTER_FILE_BYTES)
        step = plan_file(path, seen, fmt=fmt, importers=self.importers, detect=self.detect,
                         max_event_bytes=self.settings.max_event_bytes,
                         max_file_bytes=self.settings.max_file_bytes, report=report,
                         stamp={"target": self.target})
        if isinstance(step, Unchanged):
            return None
        if isinstance(step, ParkWhole):
            return [], [park_whole(path, step.code, step.reason, park_limit, report)], step.entry
        if step.spec is None:
            records, rejections, extra = self._native(step.src, step.plan, seen, report)
        else:
            imported = self._imported(key, path, step, seen, report)
            if isinstance(imported, BaseException):
                code, reason = importer_failed(step.kind, imported)
                return [], [park_whole(path, code, reason, park_limit, report)], None
            records, rejections, extra = imported
        rejections.extend(park_whole(path, code, reason, park_limit, report, stopped_at=at)
                          for code, reason, at in step.tail())
        count_pending(step, key, report)
        return records, rejections, step.entry({**seen, **extra})

    def _native(self, src: SourceText, plan: ReadPlan, seen: dict[str, Any],
                report: IngestReport,
                ) -> tuple[list[tuple[bytes, bytes]], list[Rejection], dict[str, Any]]:
        """Every new planned line under the header's session id (a bad header still goes out,
        under an empty key, to be parked by the fold); a line over the cap is parked here as a
        bounded record (never read whole; the fold then parks the session's later lines as
        INGEST_SEQ_GAP)."""
        lines = planned_lines(src, plan)
        session = seen.get("sessionId") if plan.first_line > 1 else None
        if lines and lines[0][0] == 1 and lines[0][1] is not None:
            with contextlib.suppress(ValueError):
                head = loads(lines[0][1])
                if isinstance(head, dict) and isinstance(head.get("id"), str):
                    session = head["id"]
        key = str(session).encode("utf-8") if isinstance(session, str) else b""
        if isinstance(session, str):
            report.sessions.add(session)
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
        return records, rejections, {"sessionId": session}

    def _imported(self, source: str, path: Path, step: Reading, seen: dict[str, Any],
                  report: IngestReport,
                  ) -> tuple[list[tuple[bytes, bytes]], list[Rejection], dict[str, Any]] \
            | BaseException:
        """What the importer's sessions add beyond what this file published (headers first),
        with the lines the edge screened out and the importer's rejections of new lines; the
        exception if the importer failed."""
        spec, plan = step.spec, step.plan
        assert spec is not None
        published = dict(seen.get("published") or {})
        read = import_foreign(step, source, max_event_bytes=self.settings.max_event_bytes,
                              next_seq=lambda sid: int(published.get(sid, -1)) + 1,
                              log_dir=self.settings.data_dir)
        if isinstance(read, BaseException):
            return read
        imported, screened = read.sessions, read.screened
        extra: dict[str, Any] = {k: seen[k] for k in ("published", "chains", "keys")
                                 if k in seen}
        fresh = fresh_records(imported, extra, resumed=read.resumed,
                              whole=spec.whole_document, first_line=plan.first_line)
        report.sessions.update(fresh.sessions)
        report.events_added += fresh.events
        rejections = [*fresh.rejections, *(r for r in screened if r.line >= plan.first_line)]
        for sid, seq in fresh.conflicts[:1]:
            # What this file published before is not a prefix of this import: it was
            # rewritten, or an older importer version mapped it. Reported once per file, with
            # the file's bytes, as the embedded ingest does.
            report.rewritten.append(source)
            code, reason = reimport_conflict(sid, seq)
            rejections.append(park_whole(path, code, reason, min(
                self.settings.max_event_bytes, DEAD_LETTER_FILE_BYTES), report))
        # the same line accounting as the embedded edge: a line taken is parked or imported
        count_taken(step, {r.line for r in rejections}, report)
        return fresh.records, rejections, extra

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
        workers serve it (see streams.runtime.kafka.rebuild)."""
        from streams.runtime.kafka import rebuild

        return self._job(rebuild.reindex, progress)

    def replay(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Rebuild all derived state from the earliest offsets into a fresh generation."""
        from streams.runtime.kafka import rebuild

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
            time.sleep(0.1)  # each look is one request; the switch takes a moment
        result["removed"] = []  # retired generations are deleted by the workers, later
        digest = self.call("index_digest", {})
        result.setdefault("eventsIndexed", digest.get("events"))
        return {**result, **digest}

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every letter on the dead-letter topic, in the embedded file's record shape."""
        from streams.runtime.kafka.deadletters import read_dead_letters

        letters: list[dict[str, Any]] = self._sync(
            read_dead_letters(self.bootstrap, self.topics), self.settings.request_timeout_s * 4)
        return letters

    def close(self) -> None:
        if self._producer is not None:
            run_sync(self.loop, self._producer.stop(), 10)
        run_sync(self.loop, self.requester.stop(), 10)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
