"""Integration: the search/reference contract over the Kafka runtime equals the embedded one."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from contract import answers, check_expectations, embedded_expectation

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.cli.main import main
from tests.integration.kafkaio import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def cli_env(settings: Settings) -> dict[str, str]:
    return {"RECALL_TOPIC_PREFIX": settings.topic_prefix, "RECALL_SHARDS": str(settings.shards),
            "RECALL_SESSION_TIMEOUT_S": str(settings.session_timeout_s),
            "RECALL_HEARTBEAT_S": str(settings.heartbeat_s)}


def expected_counts(files: list[Path]) -> dict[str, int]:
    counts = {}
    for path in files:
        lines = path.read_bytes().splitlines()
        counts[str(orjson.loads(lines[0])["id"])] = len(lines) - 1
    return counts


def wait_indexed(recall: Recall, counts: dict[str, int], worker: WorkerProcess,
                 timeout_s: float = 90.0) -> None:
    """Until every session is searchable with all its events (the pipeline is asynchronous)."""
    deadline = time.time() + timeout_s
    last: Any = None
    while time.time() < deadline:
        try:
            listing = {i["header"]["id"] for i in recall.list_sessions()}
            last = {"missing": sorted(set(counts) - listing)}
            if not last["missing"]:
                have = {sid: len(recall.read_session(sid)["events"]) for sid in counts}
                last = {sid: (n, counts[sid]) for sid, n in have.items() if n != counts[sid]}
                if not last:
                    return
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"not indexed in {timeout_s}s: {last!r}\n{worker.log_tail()}")


def test_kafka_runtime_answers_exactly_like_the_embedded_one(
        settings: Settings, worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    files, expected, expected_digest = embedded_expectation(tmp_path)
    worker = worker_factory()
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        report = recall.ingest(files)
        assert report.files == len(files) and report.rejected == 0
        wait_indexed(recall, expected_counts(files), worker)
        result = answers(recall)
        check_expectations(result)
        assert orjson.dumps(result) == orjson.dumps(expected)
        # the whole index, not only the answers: same logical contents as the embedded one
        assert recall.index_digest() == expected_digest
        # the CLI over Kafka prints the same page as the Python API
        cli = CliRunner().invoke(main, ["--broker", str(settings.broker), "search", "needle",
                                        "--limit", "3", "--json"], env=cli_env(settings))
        assert cli.exit_code == 0, cli.output
        assert orjson.loads(cli.stdout) == recall.search_sessions("needle", limit=3)
        # a reference appends [context, message] through the events topic
        prepared = recall.prepare_reference("ci-followup-2025-12-01", "again?",
                                            references=[{"sessionId": "child"}],
                                            message_id="kafka-ref")
        assert prepared["appended"] == [4, 5]
        wait_indexed(recall, {**expected_counts(files), "ci-followup-2025-12-01": 6}, worker)
        log = recall.read_session("ci-followup-2025-12-01")["events"]
        assert [e["data"]["id"] for e in log[4:]] == ["kafka-ref:context", "kafka-ref"]
        assert log[4]["data"] == prepared["additionalContext"]


def test_a_request_nobody_answers_times_out_with_a_stable_code(settings: Settings) -> None:
    """No worker runs: the caller gets RECALL_REQUEST_TIMEOUT after its deadline, nothing else."""
    quick = settings.model_copy(update={"request_timeout_s": 2.0})
    with Recall.connect(str(quick.broker), settings=quick) as recall:
        started = time.time()
        with pytest.raises(RecallError) as info:
            recall.search_sessions("anything")
        assert info.value.code == "RECALL_REQUEST_TIMEOUT"
        assert 1.5 <= time.time() - started < 10
