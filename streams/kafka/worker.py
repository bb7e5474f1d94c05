"""Transport: `recall worker` — one process with the fold, index and query roles (or some)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import faust

from streams.app import build_app
from streams.kafka.coordinator import QueryCoordinator
from streams.kafka.fleet import ensure_fleet_topics, read_lineup
from streams.kafka.indexing import DocumentIndexer
from streams.kafka.lineup import LineupWatcher
from streams.kafka.membership import patch_consumers
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers, ensure_topics

log = logging.getLogger("recall.worker")

ROLES = ("fold", "index", "query")
#: Seconds between stats lines; the lines are how an operator sees dead letters pile up.
STATS_EVERY_S = 5.0


async def _services(settings: Settings, roles: Sequence[str], live: int) -> list[Any]:
    """Built inside the loop: aiokafka clients bind to the loop that creates them."""
    services: list[Any] = []
    if "index" in roles:
        services.append(DocumentIndexer.for_generation(settings, live))
    if "query" in roles:
        services.append(QueryCoordinator(settings, live))
    return services


def run_worker(settings: Settings, roles: Sequence[str], *, loglevel: str = "warning") -> None:
    """Run until SIGTERM/SIGINT. Topics are created first (a broker would otherwise
    auto-create them with one partition). The worker serves the live generation of the fleet's
    lineup; when a reindex or replay makes another generation live, it restarts itself into
    that one (a faust app's consumer group and changelog are fixed when it is built)."""
    if not settings.broker:
        raise SystemExit("RECALL_BROKER is not set (e.g. kafka://127.0.0.1:9092)")
    logging.basicConfig(level=loglevel.upper())
    patch_consumers()
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    bootstrap = bootstrap_servers(settings.broker)
    loop.run_until_complete(ensure_fleet_topics(bootstrap, settings.topic_prefix))
    lineup = loop.run_until_complete(read_lineup(bootstrap, settings.topic_prefix))
    live = lineup.live
    loop.run_until_complete(ensure_topics(bootstrap, Topics.of(settings, live)))
    services = loop.run_until_complete(_services(settings, roles, live))
    watcher = LineupWatcher(settings, roles, lineup)
    services.append(watcher)
    stop = asyncio.Event()
    if "fold" not in roles:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        watcher.on_live_change = stop.set
        loop.run_until_complete(asyncio.gather(*(s.run(stop) for s in services)))
        loop.close()
        _restart_if(watcher)
        return
    app = build_app(settings, generation=live)
    processor = app.fold_processor  # type: ignore[attr-defined]
    last: dict[str, int] = {}
    # faust stops cleanly on SIGTERM; the restart happens once it has.
    watcher.on_live_change = lambda: os.kill(os.getpid(), signal.SIGTERM)

    @app.timer(STATS_EVERY_S)  # type: ignore[untyped-decorator]
    async def report_stats() -> None:
        nonlocal last
        if dict(processor.stats) != last:
            last = dict(processor.stats)
            log.warning("fold stats %s", last)

    running: list[asyncio.Task[Any]] = []

    @app.task  # type: ignore[untyped-decorator]
    async def other_roles() -> None:
        running.append(asyncio.ensure_future(asyncio.gather(*(s.run(stop) for s in services))))
        try:
            await running[0]
        finally:
            stop.set()

    async def stop_other_roles(sender: Any, **kwargs: Any) -> None:
        # Stop the other roles while the loop still runs them to the end: their consumers must
        # send LeaveGroup (a member that vanishes without it keeps its partitions forever on
        # noida-db), which a cancellation at faust's loop shutdown would cut short.
        stop.set()
        if running:
            await asyncio.wait(running, timeout=15)

    app.on_before_shutdown.connect(stop_other_roles)  # type: ignore[arg-type]

    worker = faust.Worker(app, loglevel=loglevel, loop=loop)
    # faust's terminal spinner turns the root logger to DEBUG, so every aiokafka debug call
    # builds a record that is then dropped: ~11 % of a worker's CPU, measured (bench/pipeline).
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit:
        _restart_if(watcher)
        raise


def _restart_if(watcher: LineupWatcher) -> None:
    if watcher.restart:
        log.warning("generation %s is live now: restarting into it", watcher.lineup.live)
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


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
