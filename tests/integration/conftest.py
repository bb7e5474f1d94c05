"""Integration fixtures: one real broker per session (RECALL_TEST_BROKER), unique topics per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.settings import Settings
from tests.integration.brokers import Broker, selected_brokers, start_broker, stop_broker
from tests.integration.kafkaio import WorkerProcess, start_worker

SHARDS = 4


@pytest.fixture(scope="session", params=selected_brokers(os.environ.get("RECALL_TEST_BROKER")))
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker process for the whole session; never skipped: a broker that fails to start
    fails the tests that need it, with its log tail."""
    work = tmp_path_factory.mktemp(f"broker-{request.param}")
    try:
        running = start_broker(request.param, work)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield running
    finally:
        stop_broker(running)


@pytest.fixture
def topic_prefix() -> str:
    """Unique per test, so topics and consumer groups never leak between tests."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings_env(broker: Broker, topic_prefix: str, tmp_path: Path) -> dict[str, Any]:
    """The RECALL_* environment a worker of this test runs with."""
    return {
        "RECALL_BROKER": broker.url,
        "RECALL_TOPIC_PREFIX": topic_prefix,
        "RECALL_SHARDS": SHARDS,
        "RECALL_SESSION_TIMEOUT_S": broker.session_timeout_s,
        "RECALL_HEARTBEAT_S": broker.heartbeat_s,
        "RECALL_MAX_EVENT_BYTES": 4096,
        "RECALL_DATA_DIR": tmp_path / "data",
    }


@pytest.fixture
def settings(settings_env: dict[str, Any]) -> Settings:
    return Settings(
        broker=settings_env["RECALL_BROKER"], topic_prefix=settings_env["RECALL_TOPIC_PREFIX"],
        shards=SHARDS, session_timeout_s=settings_env["RECALL_SESSION_TIMEOUT_S"],
        heartbeat_s=settings_env["RECALL_HEARTBEAT_S"],
        max_event_bytes=settings_env["RECALL_MAX_EVENT_BYTES"],
        data_dir=settings_env["RECALL_DATA_DIR"])


@pytest.fixture
def worker_factory(broker: Broker, settings_env: dict[str, Any],
                   tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start fold workers for this test; every one still running at teardown is killed."""
    started: list[WorkerProcess] = []

    def start(roles: tuple[str, ...] = (), **overrides: Any) -> WorkerProcess:
        # every worker has its own data dir (its shards and faust state), as on separate hosts
        env = {**settings_env, "RECALL_DATA_DIR": tmp_path / f"data-{len(started)}", **overrides}
        worker = start_worker(broker, env, tmp_path / f"worker{len(started)}.log", roles)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
