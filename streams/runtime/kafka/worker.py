"""Transport: `recall worker` — a supervisor of role processes (fold, index, query), and the roles.

`run_worker` creates the topics and starts one process per role under a Supervisor
(streams.runtime.kafka.supervisor), and follows the fleet's lineup for them (streams.runtime.kafka.lineup):
the fold role runs one faust app per generation (its group and changelog are fixed when it is
built), so a new live generation gets a new fold process — the warm standby the supervisor
keeps, which only waits to be told its generation; the index and query roles switch
generations in place.
`run_role` is what each of those processes runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import faust

from indexer.pipeline import use_bulk_gc
from streams.core.settings import Settings, handover_json
from streams.runtime.kafka import seam
from streams.runtime.kafka.app import build_app
from streams.runtime.kafka.connection import asked_again, client_options, diagnose, explained
from streams.runtime.kafka.coordinator import QueryCoordinator
from streams.runtime.kafka.fleet import (
    Lineup,
    control_topic,
    ensure_fleet_topics,
    read_lineup,
    replication_options,
)
from streams.runtime.kafka.lineup import LineupFollower, LineupWatcher
from streams.runtime.kafka.supervisor import (
    RoleSpec,
    Supervisor,
    name_process,
    ready_for_notices,
    watch_parent,
)
from streams.runtime.kafka.topics import Topics, ensure_topics
from streams.runtime.kafka.workspaces import KeyRing

log = logging.getLogger("recall.worker")

ROLES = ("fold", "index", "query")
#: Roles that decode, fold or write every event (the query role answers requests).
BULK_ROLES = ("fold", "index")
#: Seconds between stats lines; the lines are how an operator sees dead letters pile up.
STATS_EVERY_S = 5.0
#: The supervisor hands its settings (CLI flags included) and pid to the role processes.
SETTINGS_ENV = "_RECALL_WORKER_SETTINGS"
SUPERVISOR_ENV = "_RECALL_WORKER_SUPERVISOR"


def run_worker(settings: Settings, roles: Sequence[str], *, loglevel: str = "warning") -> None:
    """Run the roles, one process each, until SIGTERM/SIGINT. Topics are created first (a broker
    would otherwise auto-create them with one partition)."""
    if not settings.broker:
        raise SystemExit("RECALL_BROKER is not set (e.g. kafka://127.0.0.1:9092)")
    logging.basicConfig(level=loglevel.upper(),
                        format="%(asctime)s %(levelname)s supervisor: %(message)s")
    seam.install()  # the lineup follower waits on empty fetches too
    seam.long_polls(True)
    name_process("recall-worker")
    if settings.kafka_request_keys is not None:
        KeyRing.load(settings.kafka_request_keys)  # a bad keyfile stops the worker here
    lineup = _set_up(settings)
    env = {**os.environ, SETTINGS_ENV: handover_json(settings),
           SUPERVISOR_ENV: str(os.getpid())}
    wanted = list(dict.fromkeys(roles))

    def command(role: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "streams.runtime.kafka.worker", "--run-role", role,
                "--loglevel", loglevel, *extra]

    def fold(generation: int) -> RoleSpec:
        # a warm standby fold waits for its generation on stdin: a switch or a restart after
        # a crash costs no process start (Python's and faust's imports take seconds of CPU)
        return RoleSpec(command("fold", "--generation", str(generation)),
                        standby=command("fold", "--standby"), handoff=f"{generation}\n".encode())

    specs = {role: fold(lineup.live) if role == "fold" else RoleSpec(command(role))
             for role in wanted}
    supervisor = Supervisor(specs, env)

    def fold_next(lineup: Lineup) -> None:
        # the generation being built, once its job handed the fold over: its fold runs beside
        # the live one until the swap makes it the fold (streams.runtime.kafka.rebuild)
        if lineup.building is not None and lineup.folded and lineup.building != lineup.live:
            spec = fold(lineup.building)
            supervisor.start_next("fold", spec.command, spec.handoff)
        else:
            supervisor.drop_next("fold")

    def changed(old: Lineup, new: Lineup) -> None:
        def apply() -> None:
            log.info("lineup changed: live %s -> %s, building %s (folded: %s)", old.live,
                     new.live, new.building, new.folded)
            if "fold" in wanted:
                if new.live != old.live:
                    spec = fold(new.live)
                    supervisor.replace("fold", spec.command, spec.handoff)
                fold_next(new)
            supervisor.notify(["index", "query"])

        supervisor.call_soon(apply)

    if "fold" in wanted:
        supervisor.call_soon(lambda: fold_next(lineup))

    follower = LineupFollower(settings, lineup, changed)
    follower.start()
    try:
        supervisor.run()
    finally:
        follower.stop()


def _set_up(settings: Settings) -> Lineup:
    """The supervisor's start-up: the fleet's and the live generation's topics, and the lineup.
    A principal the cluster refuses (authentication, TLS, a topic's ACL) stops it with the
    STREAM_* error that says which; a lost broker is asked again (`_live_lineup`)."""
    conn = client_options(settings)
    try:
        # told here: aiokafka would retry a topic it may not use for ever, logging each attempt
        refused = asyncio.run(diagnose(conn, [control_topic(settings.topic_prefix),
                                              *Topics.of(settings).shared()]))
        if refused is not None:
            raise refused
        return asyncio.run(_live_lineup(settings, "the worker's start-up", fleet=True))
    except Exception as exc:
        raise asyncio.run(explained(conn, exc)) from None


async def _live_lineup(settings: Settings, what: str, *, fleet: bool = False) -> Lineup:
    """The lineup, once the live generation's topics exist (`fleet`: the fleet's topics first,
    the supervisor's start-up), asked again while a broker is lost (`connection.asked_again`): a
    supervisor or role started, or restarted, while the cluster loses a broker would otherwise
    exit (a role to be restarted, its imports and clients over again)."""
    bootstrap = client_options(settings)

    async def attempt() -> Lineup:
        if fleet:
            await ensure_fleet_topics(bootstrap, settings.topic_prefix,
                                      **replication_options(settings))
        lineup = await read_lineup(bootstrap, settings.topic_prefix)
        await ensure_topics(bootstrap, Topics.of(settings, lineup.live))
        return lineup

    return await asked_again(what, attempt)


async def _generation_topics(settings: Settings, generation: int) -> None:
    """`generation`'s topics (a fold told its generation), asked again as `_live_lineup` is."""
    bootstrap = client_options(settings)
    await asked_again(f"the fold role's start-up (generation {generation})",
                      lambda: ensure_topics(bootstrap, Topics.of(settings, generation)))


def run_role(settings: Settings, role: str, *, loglevel: str = "warning",
             generation: int | None = None, standby: bool = False) -> None:
    """One role of a worker, in this process, until SIGTERM/SIGINT."""
    logging.basicConfig(level=loglevel.upper(),
                        format=f"%(asctime)s %(levelname)s {role} %(name)s: %(message)s")
    seam.install()
    seam.long_polls(True)  # an idle role's consumers let Kafka hold their fetches (item 1)
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if supervisor is not None:
        if os.getppid() != int(supervisor):
            raise SystemExit(f"the supervisor of this {role} role is gone")
        watch_parent(int(supervisor), lambda: os.kill(os.getpid(), signal.SIGTERM))
    if role in BULK_ROLES:
        use_bulk_gc()  # see indexer/pipeline.py: the same bulk allocation pattern
    if role == "fold":
        _run_fold(settings, loglevel, generation, standby=standby)
    else:
        name_process(f"recall-{role}")
        _run_service(settings, role)


def _run_service(settings: Settings, role: str) -> None:
    """The index or query role and its lineup watcher on one event loop. Both follow a change
    of the live generation in place: the index role already indexes a generation being built
    (streams.runtime.kafka.lineup), the query role scatters to the new one from its next request."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    lineup = loop.run_until_complete(_live_lineup(settings, f"the {role} role's start-up"))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = LineupWatcher(settings, (role,), lineup)
    ready_for_notices(watcher.wake, loop)  # the supervisor saw the lineup change

    async def serve() -> None:
        # aiokafka clients bind to the loop that creates them: build them inside it.
        runs = [watcher.run(stop)]  # the index role's indexers run under the watcher
        if role == "query":
            coordinator = QueryCoordinator(settings, lineup.live)
            watcher.on_live_change = coordinator.switch
            runs.append(coordinator.run(stop))
        await asyncio.gather(*runs)

    loop.run_until_complete(serve())
    loop.close()


def _run_fold(settings: Settings, loglevel: str, generation: int | None, *,
              standby: bool) -> None:
    """The fold role of one generation: a faust worker running the fold agent (a standby
    first waits to be told the generation)."""
    if standby:
        name_process("recall-standby")
        # Building a fold app imports most of faust and the redactor's detectors. Done while
        # the standby waits (the app is never started: nothing connects), that work is off its
        # takeover, which comes at a reindex's end, when the index role needs the cores.
        build_app(settings, generation=1)
        generation = _await_generation()
        log.warning("the standby fold takes over generation %s", generation)
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if generation is None:
        generation = loop.run_until_complete(
            _live_lineup(settings, "the fold role's start-up")).live
    else:
        loop.run_until_complete(_generation_topics(settings, generation))
    name_process(f"recall-fold-g{generation}")
    app = build_app(settings, generation=generation)
    driver = app.recall_fold  # type: ignore[attr-defined]
    last: dict[str, int] = {}

    @app.timer(STATS_EVERY_S)  # type: ignore[untyped-decorator]
    async def report_stats() -> None:
        nonlocal last
        stats = {**driver.stats, **driver.processor.processor.stats}
        if stats != last:
            last = stats
            log.warning("fold stats %s", last)

    worker = seam.quiet_worker(faust.Worker(app, loglevel=loglevel, loop=loop))
    worker.execute_from_commandline()


def _await_generation() -> int:
    """A standby fold: block until the supervisor names the generation to run (SIGTERM or a
    closed stdin: exit)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    return int(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streams.runtime.kafka.worker",
                                     description="Run a worker (settings from RECALL_*).")
    parser.add_argument("--role", action="append", choices=ROLES,
                        help="fold, index and/or query (repeatable; default: all)")
    parser.add_argument("--run-role", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--generation", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--standby", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args(argv)
    given = os.environ.get(SETTINGS_ENV)
    settings = Settings.model_validate_json(given) if given else Settings()
    if args.run_role:
        run_role(settings, args.run_role, loglevel=args.loglevel, generation=args.generation,
                 standby=args.standby)
    else:
        run_worker(settings, args.role or list(ROLES), loglevel=args.loglevel)


if __name__ == "__main__":
    main()
