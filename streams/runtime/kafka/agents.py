"""Transport: the thin faust agent of the fold; the work is streams.runtime.kafka.folding.Fold and the
faust glue is streams.runtime.kafka.seam.FaustFold."""

from __future__ import annotations

import faust

from streams.core.detectors import build_redactor
from streams.core.settings import Settings
from streams.runtime.kafka.connection import client_options
from streams.runtime.kafka.folding import Fold
from streams.runtime.kafka.foldstep import FoldProcessor
from streams.runtime.kafka.producer import batching_producer
from streams.runtime.kafka.seam import FaustFold, FoldTable
from streams.runtime.kafka.topics import FOLD_TABLE, Topics

#: Records per batch. A batch costs one table write per touched key and one wait for the
#: document acks, so bigger batches amortise more when sessions are bursty.
BATCH_MAX = 500
#: How long a partial batch may wait: the latency floor of an event on a quiet topic.
BATCH_WITHIN_S = 0.05
#: Output producer linger: documents of one batch are sent together anyway.
OUTPUT_LINGER_MS = 2


def register_fold_agent(app: faust.App, settings: Settings, topics: Topics) -> FaustFold:
    """Register the fold table and agent on `app`; return the driver (its `stats` and its
    processor's count)."""
    table = FoldTable(
        app, name=FOLD_TABLE, beacon=app.tables.beacon, partitions=settings.shards,
        key_type=str, value_type=bytes,
        help="per-session fold state: header, paged surface, recent digests")
    app.tables.add(table)
    source = app.topic(topics.events, key_type=bytes, value_type=bytes,
                       partitions=settings.shards)
    fold = Fold(topics, table.view(), table.write,
                FoldProcessor(max_event_bytes=settings.max_event_bytes,
                              redactor=build_redactor(settings)))
    driver = FaustFold(app, table, fold)

    @app.agent(source, name="fold")
    async def run_fold(stream: faust.StreamT[bytes]) -> None:
        # Outputs get their own producer (a short linger of their own, every batch's document
        # acks awaited together), apart from faust's, which writes the changelog.
        assert settings.broker is not None
        # acks=all: offsets are committed once these acks are in, so a document acked by a
        # leader alone and lost with it (a stalled leader replaced, then truncated) was lost for
        # good; on a single broker it costs nothing
        fold.producer = batching_producer(client_options(settings),
                                          linger_ms=OUTPUT_LINGER_MS, acks="all")
        await fold.producer.start()
        try:
            await driver.run(stream, BATCH_MAX, BATCH_WITHIN_S)
        finally:
            await fold.producer.stop()

    return driver
