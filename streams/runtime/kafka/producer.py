"""Entry point for producers: log lines → `<p>.events` records, packed per session into segments.

A record of the events topic is a segment: one session's contiguous run of log lines (JSONL,
joined by `\\n`), keyed by the session id. One line per record is a valid segment too, so a
producer in any language may keep writing one event per record; packing is how the fold's
per-record cost (faust's stream machinery, docs/ENGINE-NOTES.md) stops mattering. `EventProducer` is
the Python API:
`recall ingest`, reference appends and live producers send lines through it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.runtime.kafka.codec import encode_segment
from streams.runtime.kafka.connection import Connect, connect_kwargs

#: Upper bound of a segment's bytes (a line longer than this travels alone). Big enough that a
#: segment carries a few hundred typical events, small enough to stay far below brokers' 1 MB
#: default record limit.
SEGMENT_MAX_BYTES = 64 * 1024
#: How long a line may wait for more lines of its session before its segment is sent.
SEGMENT_LINGER_MS = 5
#: Producer batches: big enough that a batch of segments or documents rarely fills one and
#: blocks `send()` for a round trip (16 KB, aiokafka's default, fills after a few dozen records
#: and stalls the fold loop, docs/ENGINE-NOTES.md).
BATCH_BYTES = 1024 * 1024


#: Batches are zstd-compressed (aiokafka through cramjam): JSON lines compress well, and brokers
#: store compressed batches as they are (noida-db rewrites its whole data file while anything
#: changes, so the bytes it holds are most of its CPU).
COMPRESSION = "zstd"


def batching_producer(bootstrap: Connect, **options: Any) -> AIOKafkaProducer:
    """An aiokafka producer with large compressed batches (callers await acks once per batch
    of sends)."""
    settings: dict[str, Any] = {"linger_ms": 2, "max_batch_size": BATCH_BYTES,
                                "max_request_size": 2 * BATCH_BYTES,
                                "compression_type": COMPRESSION}
    settings.update(options)
    return AIOKafkaProducer(**connect_kwargs(bootstrap), **settings)


def pack_segments(lines: Iterable[bytes], max_bytes: int = SEGMENT_MAX_BYTES) -> Iterator[bytes]:
    """Consecutive lines of one session → segments of at most `max_bytes` (a longer line alone),
    in order."""
    run: list[bytes] = []
    size = 0
    for line in lines:
        if run and size + 1 + len(line) > max_bytes:
            yield encode_segment(run)
            run, size = [], 0
        size += len(line) + (1 if run else 0)
        run.append(line)
    if run:
        yield encode_segment(run)


class EventProducer:
    """Sends log lines to the events topic, each session's lines packed into segments.

    `send(session, line)` buffers the line; the session's segment leaves once it would pass
    `max_segment_bytes` or `linger_ms` after its first line. `send_lines` packs lines known
    together (a file) at once. `flush()` sends everything buffered and waits for every ack.
    Lines of one session go out in the order they were given (one producer, partitioned by key)."""

    def __init__(self, bootstrap: Connect, topic: str, *,
                 max_segment_bytes: int = SEGMENT_MAX_BYTES,
                 linger_ms: float = SEGMENT_LINGER_MS, acks: Any = "all",
                 idempotent: bool = False, producer: AIOKafkaProducer | None = None) -> None:
        self.topic = topic
        self.max_segment_bytes = max_segment_bytes
        self.linger_s = linger_ms / 1000
        # idempotent (RECALL_KAFKA_IDEMPOTENT): a batch retried after a leader change is not
        # written twice; aiokafka then requires acks=all
        self.producer = producer or batching_producer(
            bootstrap, **({"acks": "all", "enable_idempotence": True} if idempotent
                          else {"acks": acks}))
        self._own = producer is None
        self._buffers: dict[str, list[bytes]] = {}
        self._sizes: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._acks: list[asyncio.Future[Any]] = []
        self._order = asyncio.Lock()
        self.records = 0

    async def start(self) -> None:
        if self._own:
            await self.producer.start()

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            if self._own:
                await self.producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def send(self, session_id: str, line: bytes) -> None:
        """Buffer one line of `session_id`'s log (no newline inside)."""
        size = self._sizes.get(session_id, 0)
        if size and size + 1 + len(line) > self.max_segment_bytes:
            await self._emit(session_id)
            size = 0
        self._buffers.setdefault(session_id, []).append(line)
        self._sizes[session_id] = size + len(line) + (1 if size else 0)
        if session_id not in self._timers:
            self._timers[session_id] = asyncio.get_running_loop().call_later(
                self.linger_s, self._due, session_id)

    async def send_lines(self, session_id: str, lines: Iterable[bytes]) -> None:
        """Send consecutive lines of one session now, as few segments as the bound allows."""
        await self._emit(session_id)  # anything buffered for it goes first
        async with self._order:
            for segment in pack_segments(lines, self.max_segment_bytes):
                await self._send(session_id, segment)

    async def flush(self) -> None:
        for session_id in list(self._buffers):
            await self._emit(session_id)
        acks, self._acks = self._acks, []
        if acks:
            await asyncio.gather(*acks)

    def _due(self, session_id: str) -> None:
        self._timers.pop(session_id, None)
        task = asyncio.ensure_future(self._emit(session_id))
        self._acks.append(task)  # a failed send surfaces at the next flush

    async def _emit(self, session_id: str) -> None:
        timer = self._timers.pop(session_id, None)
        if timer is not None:
            timer.cancel()
        lines = self._buffers.pop(session_id, None)
        self._sizes.pop(session_id, None)
        if lines:
            async with self._order:
                await self._send(session_id, encode_segment(lines))

    async def _send(self, session_id: str, value: bytes) -> None:
        self._acks.append(await self.producer.send(self.topic, value,
                                                   key=session_id.encode("utf-8")))
        self.records += 1
        if len(self._acks) > 4096:  # drop the acks already in; keep failures to raise
            done = [f for f in self._acks if f.done()]
            for future in done:
                with contextlib.suppress(asyncio.CancelledError):
                    future.result()
            self._acks = [f for f in self._acks if not f.done()]
