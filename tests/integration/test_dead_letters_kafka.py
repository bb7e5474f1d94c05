"""Dead letters over Kafka are readable by people: `Recall.dead_letters()`, `recall
dead-letters --json` and the web page list the `<prefix>.dead-letter` topic — a line the client
rejected while importing a file (an oversized line, kept as a bounded record) and lines the fold
parked (one inside a file's segment, one raw record) — with the reason code and the original
bytes."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from factories import header, user
from starlette.testclient import TestClient

from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.ui.app import create_app
from streams.runtime.kafka.topics import Topics
from tests.integration.kafkaio import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
BAD_RECORD = b'{"seq": 0, "type": "user/message", "data": {"role": "user", "content": 5'


async def _produce(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def test_dead_letters_over_kafka_list_the_topic(
        settings: Settings, settings_env: dict[str, Any],
        worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    worker_factory()
    log = tmp_path / "with-bad-line.jsonl"
    log.write_bytes(b"".join([orjson.dumps(header("dl-k", cwd="/w")) + b"\n",
                              orjson.dumps(user(0, "fine")) + b"\n",
                              orjson.dumps(user(1, "x" * 5000)) + b"\n",
                              b"{this is not json\n"]))
    topics = Topics.of(settings)
    small = settings.model_copy(update={"max_event_bytes": 4096})
    with Recall.connect(str(settings.broker), settings=small) as recall:
        assert recall.dead_letters() == []
        recall.ingest([log])
        asyncio.run(_produce(str(settings.broker).removeprefix("kafka://"), topics.events,
                             b"dl-raw", BAD_RECORD))
        deadline = time.time() + 90
        letters: list[dict[str, Any]] = []
        while time.time() < deadline and len(letters) < 3:
            letters = recall.dead_letters()
            time.sleep(0.5)
        assert len(letters) == 3, letters
        imported = next(d for d in letters if d["source"] == str(log))
        assert imported["line"] == 3 and imported["code"] == "INGEST_OVERSIZED_EVENT"
        assert imported["bytes"] is None and "bounded record" in imported["reason"]
        folded = {d["sessionId"]: d for d in letters if d["source"].startswith(topics.events)}
        in_segment = folded["dl-k"]  # the file's lines went out as one segment record
        assert in_segment["code"] == "INGEST_MALFORMED_JSON" and in_segment["line"] == 2
        assert base64.b64decode(in_segment["bytes"]) == b"{this is not json"
        raw = folded["dl-raw"]
        assert raw["code"] == "INGEST_MALFORMED_JSON" and raw["line"] == 0
        assert base64.b64decode(raw["bytes"]) == BAD_RECORD
        page = TestClient(create_app(recall), base_url="http://127.0.0.1").get("/dead-letters")
        assert page.status_code == 200 and "3 parked records" in page.text
        assert "{this is not json" in page.text
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.update({k: str(v) for k, v in settings_env.items()}, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "streams", "dead-letters", "--json"],
                          capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(d["key"] for d in orjson.loads(done.stdout)) == sorted(
        d["key"] for d in letters)
