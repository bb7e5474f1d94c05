"""Transport: `python -m streams.kafka.worker` runs one fold worker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging

import faust

from streams.app import build_app
from streams.settings import Settings
from streams.topics import Topics, bootstrap_servers, ensure_topics

log = logging.getLogger("recall.worker")

#: Seconds between stats lines; the lines are how an operator sees dead letters pile up.
STATS_EVERY_S = 5.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams.kafka.worker",
                                     description="Run a fold worker (settings from RECALL_*).")
    parser.add_argument("--broker-flavor", choices=["kafka", "tansu"], default=None,
                        help="tansu enables its work-arounds (one record per producer batch)")
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args(argv)
    settings = Settings()
    if not settings.broker:
        parser.error("RECALL_BROKER is not set (e.g. kafka://127.0.0.1:9092)")
    # faust creates only the last path component of its datadir.
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    # faust's Worker runs its own loop; create it first so topic setup shares it.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(ensure_topics(bootstrap_servers(settings.broker),
                                          Topics.of(settings)))
    app = build_app(settings, flavor=args.broker_flavor)
    processor = app.fold_processor  # type: ignore[attr-defined]
    last: dict[str, int] = {}

    @app.timer(STATS_EVERY_S)  # type: ignore[untyped-decorator]
    async def report_stats() -> None:
        nonlocal last
        if dict(processor.stats) != last:
            last = dict(processor.stats)
            log.warning("fold stats %s", last)

    faust.Worker(app, loglevel=args.loglevel, loop=loop).execute_from_commandline()


if __name__ == "__main__":
    main()
