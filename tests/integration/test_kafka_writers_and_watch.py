"""Writers over Kafka: the query worker never produces into a session it does not write (a
reference to an outside session returns its messages), sessions recall writes get appends and
references, and `recall watch` with RECALL_BROKER ships a growing file's new lines (partial lines
wait for their newline; kill -9 and a restart lose and duplicate nothing)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from datadirs import SAMPLES
from factories import header, user

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from tests.integration.kafkaio import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def _until(check: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    deadline = time.time() + timeout_s
    last: Any = None
    while time.time() < deadline:
        try:
            value = check()
            if value:
                return value
            last = f"got {value!r}"
        except RecallError as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"{what} not reached in {timeout_s} s ({last!r})")


def _events(recall: Recall, session: str) -> list[dict[str, Any]]:
    return list(recall.read_session(session)["events"])


def test_query_worker_appends_only_to_sessions_recall_writes(
        settings: Settings, worker_factory: Callable[[], WorkerProcess]) -> None:
    worker_factory()
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        recall.ingest([SAMPLES])
        _until(lambda: len(recall.list_sessions()) == 4, "samples indexed")
        before = _events(recall, "docs-quickstart-2025-11-25")
        result = recall.prepare_reference("docs-quickstart-2025-11-25", "same?",
                                          references=[{"sessionId": "ci-billing-2025-11-24"}])
        assert result["delivery"] == "returned" and "appended" not in result
        assert [m["source"]["kind"] for m in result["messages"]] == ["session-reference", "user"]
        with pytest.raises(RecallError) as refused:
            recall.append_message("docs-quickstart-2025-11-25", "hi")
        assert refused.value.code == "RECALL_NOT_WRITER"
        created = recall.create_session("own-k", cwd="/home/dev/shop")
        assert created["writer"] == "recall"
        assert recall.append_message("own-k", "first")["seqs"] == [0]
        assert recall.append_message("own-k", "second")["seqs"] == [1]  # read your writes
        ref = recall.prepare_reference("own-k", "this one",
                                       references=[{"sessionId": "ci-billing-2025-11-24"}],
                                       message_id="k-ref")
        assert ref["delivery"] == "appended" and ref["appended"] == [2, 3]
        log = _until(lambda: (e := _events(recall, "own-k")) and len(e) == 4 and e, "appends")
        assert [e["data"]["id"] for e in log[2:]] == ["k-ref:context", "k-ref"]
        time.sleep(2)  # nothing went to the outside session meanwhile
        assert _events(recall, "docs-quickstart-2025-11-25") == before


def test_watch_ships_new_lines_to_the_events_topic(
        settings: Settings, settings_env: dict[str, Any],
        worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    worker_factory()
    root = tmp_path / "agent"
    root.mkdir()
    log = root / "s.jsonl"
    lines = [orjson.dumps(header("shipped", cwd="/w")) + b"\n"] + [
        orjson.dumps(user(i, f"shipped line {i} tok{i}z")) + b"\n" for i in range(12)]
    log.write_bytes(b"".join(lines[:4]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.update({k: str(v) for k, v in settings_env.items()}, PYTHONPATH=str(ROOT),
               RECALL_DATA_DIR=str(tmp_path / "shipper"))

    def start() -> tuple[subprocess.Popen[bytes], queue.Queue[dict[str, Any]]]:
        proc = subprocess.Popen([sys.executable, "-m", "streams", "watch", str(root), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                cwd=ROOT)
        events: queue.Queue[dict[str, Any]] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                events.put(orjson.loads(raw))
        threading.Thread(target=read, daemon=True).start()
        assert events.get(timeout=60)["event"] == "started"
        return proc, events

    proc, _ = start()
    try:
        with Recall.connect(str(settings.broker), settings=settings) as recall:
            _until(lambda: len(_events(recall, "shipped")) == 3, "first lines")
            with log.open("ab", buffering=0) as agent:
                agent.write(lines[4][:20])  # a partial line waits for its newline
                time.sleep(1.0)
                agent.write(lines[4][20:] + lines[5])
            _until(lambda: len(_events(recall, "shipped")) == 5, "grown lines")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            with log.open("ab") as agent:
                agent.write(b"".join(lines[6:10]))
            proc, _ = start()
            with log.open("ab") as agent:
                agent.write(b"".join(lines[10:]))
            events = _until(lambda: (e := _events(recall, "shipped")) and len(e) == 12 and e,
                            "every line after the restart")
            assert [e["seq"] for e in events] == list(range(12))
            assert [e["data"]["content"][0]["text"] for e in events] == [
                f"shipped line {i} tok{i}z" for i in range(12)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
