"""Integration: `recall worker` is a supervisor of role processes — a role killed with kill -9 is
started again while the others keep running, the roles die with their supervisor, and the fold of
a generation being built runs beside the live one until it takes over."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factories import header, user

from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.fleet import Lineup, publish_lineup
from streams.runtime.kafka.topics import bootstrap_servers
from tests.integration.kafkaio import WorkerProcess, publish
from tests.integration.test_kafka_contract import wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def roles_of(supervisor: int) -> dict[str, int]:
    """Process name (`recall-fold-g1`, `recall-index`, `recall-query`, `recall-standby`: the
    roles name themselves) -> pid, for the supervisor's running children."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(stat[1]) == supervisor and stat[0] != "Z" and name.startswith("recall-"):
            out[name.removeprefix("recall-")] = int(entry.name)
    return out


def wait_for(condition: Callable[[], Any], what: str, worker: WorkerProcess,
             timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        assert worker.process.poll() is None, worker.log_tail()
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout_s} s\n{worker.log_tail()}")


def test_a_killed_role_is_restarted_and_the_others_keep_running(
        settings: Settings, worker_factory: Callable[..., WorkerProcess]) -> None:
    worker = worker_factory()
    supervisor = worker.process.pid
    roles = wait_for(lambda: (r := roles_of(supervisor)) and len(r) == 4 and r,
                     "three roles and the fold's standby", worker)
    assert set(roles) == {"fold-g1", "index", "query", "standby"}
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        publish(recall, [("sv-0", header("sv-0")), ("sv-0", user(0, "before any kill"))])
        wait_indexed(recall, {"sv-0": 1}, worker)
        counts = {"sv-0": 1}
        for n, role in enumerate(("index", "fold-g1", "query"), start=1):
            before = roles_of(supervisor)
            os.kill(before[role], signal.SIGKILL)
            after = wait_for(lambda r=role, b=before: (now := roles_of(supervisor)).get(r)
                             not in (None, b[r]) and "standby" in now and now,
                             f"a new {role} process", worker)
            if role == "fold-g1":  # the warm standby took over; a new standby waits behind it
                assert after[role] == before["standby"] != after["standby"]
            # the supervisor itself and the other roles were not touched
            assert worker.process.poll() is None
            untouched = {role, "standby"}
            assert {k: v for k, v in after.items() if k not in untouched} == {
                k: v for k, v in before.items() if k not in untouched}
            # and the worker does all its work again: a new session is folded, indexed, found
            sid = f"sv-{n}"
            publish(recall, [(sid, header(sid)), (sid, user(0, f"after the {role} kill"))])
            counts[sid] = 1
            wait_indexed(recall, counts, worker)
            assert recall.search_sessions(f"after the {role} kill")["items"]
    roles = roles_of(supervisor)
    # the supervisor dies with kill -9: its roles go with it (Linux parent-death signal)
    os.kill(supervisor, signal.SIGKILL)
    worker.process.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists()
                                              and _alive(pid) for pid in roles.values()):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in roles.values()), roles


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_fold_of_a_folded_building_generation_runs_beside_the_live_one_and_takes_over(
        settings: Settings, worker_factory: Callable[..., WorkerProcess]) -> None:
    """A reindex job that folded generation 2 marks it `folded`: every worker starts its fold of
    2 beside the live one (kept running like a role), stops it if the build is dropped, and at
    the swap that same process becomes the fold (no new process, no recovery at the swap). The
    standby it was started by is replaced only after the swap or the drop, not during the
    build."""
    worker = worker_factory()
    supervisor = worker.process.pid
    bootstrap = bootstrap_servers(str(settings.broker))

    def lineup(value: Lineup) -> None:
        asyncio.run(publish_lineup(bootstrap, settings.topic_prefix, value))

    wait_for(lambda: set(roles_of(supervisor)) == {"fold-g1", "index", "query", "standby"},
             "the roles", worker)
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        publish(recall, [("nx-0", header("nx-0")), ("nx-0", user(0, "before the build"))])
        wait_indexed(recall, {"nx-0": 1}, worker)
        lineup(Lineup(live=1, building=2, folded=True))
        both = wait_for(lambda: (r := roles_of(supervisor)) and {"fold-g1", "fold-g2"}
                        <= set(r) and r, "the fold of generation 2 beside generation 1's", worker)
        # the standby became that fold; the next one starts only after the swap or the drop
        assert "standby" not in both
        os.kill(both["fold-g2"], signal.SIGKILL)  # restarted like any role
        both = wait_for(lambda: (r := roles_of(supervisor)).get("fold-g2") not in (
            None, both["fold-g2"]) and r, "generation 2's fold started again", worker)
        lineup(Lineup(live=1))  # the build was dropped: its fold stops
        wait_for(lambda: "fold-g2" not in roles_of(supervisor), "generation 2's fold gone",
                 worker)
        wait_for(lambda: "standby" in roles_of(supervisor), "a standby after the drop", worker)
        lineup(Lineup(live=1, building=2, folded=True))
        before = wait_for(lambda: (r := roles_of(supervisor)) and "fold-g2" in r
                          and "standby" not in r and r, "generation 2's fold again", worker)
        lineup(Lineup(live=2, retired=((1, int(time.time() * 1000)),)))
        after = wait_for(lambda: (r := roles_of(supervisor)) and "fold-g1" not in r and r,
                         "generation 1's fold stopped at the swap", worker)
        assert after["fold-g2"] == before["fold-g2"]  # the running fold took over
        wait_for(lambda: "standby" in roles_of(supervisor), "a standby after the swap", worker)
        publish(recall, [("nx-1", header("nx-1")), ("nx-1", user(0, "after the swap"))])
        wait_for(lambda: recall.index_generation() == "gen-000002", "the swap", worker)
        wait_indexed(recall, {"nx-0": 1, "nx-1": 1}, worker)
        assert recall.search_sessions("after the swap")["items"]
        assert recall.search_sessions("before the build")["items"]
