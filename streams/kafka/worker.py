"""Transport: `recall worker` — one process with the fold, index and query roles (or some)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Any

import faust

from indexer import ShardSet
from streams.app import build_app
from streams.embedded import index_config
from streams.kafka.coordinator import QueryCoordinator
from streams.kafka.fleet import ensure_fleet_topics
from streams.kafka.indexing import DocumentIndexer
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers, ensure_topics

log = logging.getLogger("recall.worker")

ROLES = ("fold", "index", "query")
#: Seconds between stats lines; the lines are how an operator sees dead letters pile up.
STATS_EVERY_S = 5.0


async def _services(settings: Settings, roles: Sequence[str]) -> list[Any]:
    """Built inside the loop: aiokafka clients bind to the loop that creates them."""
    services: list[Any] = []
    if "index" in roles:
        # Shard k of this worker follows partition k; the files are this worker's own.
        shards = ShardSet(settings.data_dir / "kafka-index", index_config(settings),
                          key_dir=settings.data_dir / "kafka-index")
        services.append(DocumentIndexer(settings, shards))
    if "query" in roles:
        services.append(QueryCoordinator(settings))
    return services


def run_worker(settings: Settings, roles: Sequence[str], *, loglevel: str = "warning") -> None:
    """Run until SIGTERM/SIGINT. Topics are created first (a broker would otherwise
    auto-create them with one partition)."""
    if not settings.broker:
        raise SystemExit("RECALL_BROKER is not set (e.g. kafka://127.0.0.1:9092)")
    logging.basicConfig(level=loglevel.upper())
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    bootstrap = bootstrap_servers(settings.broker)
    loop.run_until_complete(ensure_topics(bootstrap, Topics.of(settings)))
    loop.run_until_complete(ensure_fleet_topics(bootstrap, settings.topic_prefix,
                                                settings.shards))
    services = loop.run_until_complete(_services(settings, roles))
    stop = asyncio.Event()
    if "fold" not in roles:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.run_until_complete(asyncio.gather(*(s.run(stop) for s in services)))
        return
    app = build_app(settings)
    processor = app.fold_processor  # type: ignore[attr-defined]
    last: dict[str, int] = {}

    @app.timer(STATS_EVERY_S)  # type: ignore[untyped-decorator]
    async def report_stats() -> None:
        nonlocal last
        if dict(processor.stats) != last:
            last = dict(processor.stats)
            log.warning("fold stats %s", last)

    if services:
        @app.task  # type: ignore[untyped-decorator]
        async def other_roles() -> None:
            # Cancelled at shutdown: each service's `finally` stops its consumer cleanly.
            try:
                await asyncio.gather(*(s.run(stop) for s in services))
            finally:
                stop.set()

    worker = faust.Worker(app, loglevel=loglevel, loop=loop)
    # faust's terminal spinner turns the root logger to DEBUG, so every aiokafka debug call
    # builds a record that is then dropped: ~11 % of a worker's CPU, measured (bench/pipeline).
    worker.spinner = None
    worker.execute_from_commandline()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams.kafka.worker",
                                     description="Run a worker (settings from RECALL_*).")
    parser.add_argument("--broker-flavor", choices=["kafka", "tansu"], default=None,
                        help="tansu enables its work-arounds (one record per producer batch)")
    parser.add_argument("--role", action="append", choices=ROLES,
                        help="fold, index and/or query (repeatable; default: all)")
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.broker_flavor:
        settings = settings.model_copy(update={"broker_flavor": args.broker_flavor})
    run_worker(settings, args.role or list(ROLES), loglevel=args.loglevel)


if __name__ == "__main__":
    main()
