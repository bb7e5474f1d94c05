"""`recall hook` over Kafka publishes through the fleet shipper, so each hook sends only the lines
no earlier hook (or watcher on the same data dir) has sent, instead of the whole transcript each
time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import header, user

from streams.core.settings import Settings
from streams.facade import Recall
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_writers_and_watch import _until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def test_each_hook_publishes_only_what_is_new(
        settings: Settings, settings_env: dict[str, Any],
        worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    worker_factory()
    log = tmp_path / "agent" / "hooked.jsonl"
    log.parent.mkdir()
    lines = [orjson.dumps(header("hooked", cwd="/w")) + b"\n"] + [
        orjson.dumps(user(i, f"hooked line {i} hk{i}q")) + b"\n" for i in range(9)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.update({k: str(v) for k, v in settings_env.items()}, PYTHONPATH=str(ROOT),
               RECALL_DATA_DIR=str(tmp_path / "host"))

    def hook() -> dict[str, Any]:
        payload = {"session_id": "hooked", "transcript_path": str(log), "cwd": "/w",
                   "hook_event_name": "Stop"}
        done = subprocess.run([sys.executable, "-m", "streams", "hook", "--verbose"],
                              input=orjson.dumps(payload), capture_output=True, env=env,
                              cwd=ROOT, timeout=120)
        assert done.returncode == 0 and done.stdout == b""
        result: dict[str, Any] = orjson.loads(done.stderr.splitlines()[-1])
        assert "error" not in result, result
        return result

    log.write_bytes(b"".join(lines[:4]))
    assert hook()["eventsAdded"] == 3
    with log.open("ab") as agent:
        agent.write(b"".join(lines[4:7]))
    assert hook()["eventsAdded"] == 3  # the three new lines, not the six of the transcript
    assert hook()["eventsAdded"] == 0  # nothing new: nothing published
    # a watcher on the same data dir continues where the hooks stopped
    with log.open("ab") as agent:
        agent.write(b"".join(lines[7:]))
    watch = subprocess.Popen([sys.executable, "-m", "streams", "watch", str(log.parent),
                              "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=env, cwd=ROOT)
    try:
        assert watch.stdout is not None
        started = orjson.loads(watch.stdout.readline())
        assert started["event"] == "started"
        batch = orjson.loads(watch.stdout.readline())
        assert batch["event"] == "batch" and batch["eventsAdded"] == 3  # lines 7–9 only
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        events = _until(lambda: (e := recall.read_session("hooked")["events"]) and len(e) == 9
                        and e, "every line")
        assert [e["seq"] for e in events] == list(range(9))
