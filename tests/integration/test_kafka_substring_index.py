"""Integration: over Kafka a substring search never builds the substring (trigram) index — it
answers RECALL_SUBSTRING_INDEX_MISSING and the workers' shards stay without it — until the
explicit build (`recall index substring`); then answers equal the embedded runtime's (whose
first substring search builds it) and a later event is found by substring at once. The web
page's GET offers the build and builds nothing, as on the embedded runtime."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from factories import header, user
from starlette.testclient import TestClient

from projections.errors import RECALL_SUBSTRING_INDEX_MISSING, RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.cli.main import main
from streams.faces.ui.app import create_app
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_contract import cli_env, expected_counts, wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SESSIONS = {
    "alpha": ["the cabinet is open", "会话搜索功能"],
    "beta": ["cabinets everywhere", "nothing here"],
    "gamma": ["a vocabulary lesson", "abide by it"],
    "delta": ["plain words only"],
    "epsilon": ["habit forming", "probability"],
    "zeta": ["no match at all"],
    "eta": ["Abigail wrote this"],
    "theta": ["sabine and rabbits"],
}
QUERIES = ("abi", "ab", "cab", "搜索", "ere")


def _write(path: Path, sid: str, texts: list[str], created: int) -> Path:
    lines = [header(sid, created_at=created), *(user(i, t) for i, t in enumerate(texts))]
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    return path


def _answers(recall: Recall) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for query in QUERIES:
        out[f"sessions:{query}"] = recall.search_sessions(query, mode="substring", limit=20,
                                                          now_ms=1)["items"]
    for sid in ("gamma", "epsilon"):
        out[f"events:{sid}"] = recall.search_events(sid, "abi", mode="substring",
                                                    limit=20)["items"]
    return out


def _refused(call: Callable[[], Any]) -> None:
    with pytest.raises(RecallError) as caught:
        call()
    assert caught.value.code == RECALL_SUBSTRING_INDEX_MISSING, caught.value


def test_substring_search_over_kafka_needs_the_explicit_build_then_equals_embedded(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    files = [_write(tmp_path / f"{sid}.jsonl", sid, texts, 1_700_000_000_000 + n)
             for n, (sid, texts) in enumerate(SESSIONS.items())]
    later = _write(tmp_path / "later.jsonl", "later", ["a rabid fan", "unrelated"],
                   1_700_000_100_000)
    with Recall.open(tmp_path / "embedded") as embedded:
        assert embedded.ingest(files).rejected == 0
        expected = _answers(embedded)  # the embedded CLI step: its first search builds
        assert embedded.ingest([later]).rejected == 0
        expected_later = _answers(embedded)
        expected_digest = embedded.index_digest()
    assert {i["header"]["id"] for i in expected["sessions:abi"]} == {
        "alpha", "beta", "gamma", "epsilon", "eta", "theta"}

    worker = worker_factory()
    env = cli_env(settings)
    broker = ["--broker", str(settings.broker)]
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        assert recall.ingest(files).rejected == 0
        wait_indexed(recall, expected_counts(files), worker)

        # reads are refused, on the scatter path and one session's alike, and build nothing
        _refused(lambda: recall.search_sessions("abi", mode="substring", now_ms=1))
        _refused(lambda: recall.search_events("gamma", "abi", mode="substring"))
        _refused(lambda: recall.search_sessions("ab", mode="substring", now_ms=1))
        cli = CliRunner().invoke(main, [*broker, "search", "abi", "--substring", "--json"],
                                 env=env)
        assert cli.exit_code == 1, cli.output
        error = orjson.loads(cli.stdout)["error"]
        assert error["code"] == RECALL_SUBSTRING_INDEX_MISSING
        assert "recall index substring" in error["message"]
        # the web page's GET offers the build (a POST) and builds nothing either
        page = TestClient(create_app(recall), base_url="http://127.0.0.1").get(
            "/search", params={"q": "abi", "substring": "1"})
        assert page.status_code == 200 and 'action="/substring-index"' in page.text
        assert not recall.substring_ready()
        assert recall.index_digest()["substring"]["built"] == "none"
        # token searches (CJK ones through the trigram index too) answer meanwhile
        assert recall.search_sessions("搜索", now_ms=1)["items"]

        built = CliRunner().invoke(main, [*broker, "index", "substring", "--json"], env=env)
        assert built.exit_code == 0, built.output
        assert orjson.loads(built.stdout)["documentsAdded"] > 0
        assert recall.substring_ready()
        assert orjson.dumps(_answers(recall)) == orjson.dumps(expected)
        page = TestClient(create_app(recall), base_url="http://127.0.0.1").get(
            "/search", params={"q": "abi", "substring": "1"})
        assert 'action="/substring-index"' not in page.text and 'class="hit ' in page.text

        # a later event is found by substring: the owners' writers keep the index current
        assert recall.ingest([later]).rejected == 0
        wait_indexed(recall, expected_counts([*files, later]), worker)
        got = _answers(recall)
        assert "later" in {i["header"]["id"] for i in got["sessions:abi"]}
        assert orjson.dumps(got) == orjson.dumps(expected_later)
        assert recall.index_digest() == expected_digest
        again = CliRunner().invoke(main, [*broker, "index", "substring", "--json"], env=env)
        assert again.exit_code == 0 and orjson.loads(again.stdout)["documentsAdded"] == 0
