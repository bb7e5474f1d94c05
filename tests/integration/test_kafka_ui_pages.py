"""`recall ui` over the Kafka runtime renders the same pages as over the embedded one (the pages
use only the `Recall` facade)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.cli.demo import sample_dir
from streams.faces.ui.app import create_app
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_contract import expected_counts, wait_indexed
from tests.ui import corpus

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PAGES = ("/", "/?cwd=/home/dev/shop", "/session?id=ci-billing-2025-11-24",
         "/session?id=ci-billing&view=surface", f"/session?id={corpus.HOSTILE_SESSION}",
         "/search?q=Traceback", "/search?q=%E6%90%9C%E7%B4%A2", "/search?q=EUR&session=ci-billing",
         "/search?q=EUR&surface=shadowed&no_injected=1",
         "/event?id=ci-billing-2025-11-24&seq=7&raw=1",
         "/reference?target=ci-followup-2025-12-01&source=ci-billing-2025-11-24&label=CI&message=hi")
_FORM_TOKEN = re.compile(r'name="csrf" value="[^"]+"')
_MESSAGE_ID = re.compile(r"msg-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _pages(recall: Recall) -> dict[str, str]:
    client = TestClient(create_app(recall), base_url="http://127.0.0.1")
    out = {}
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[-500:])
        # one random form token per server, a fresh message id per reference preview
        out[path] = _MESSAGE_ID.sub("msg-ID", _FORM_TOKEN.sub("csrf", response.text))
    return out


def test_ui_pages_over_kafka_equal_the_embedded_ones(
        settings: Settings, worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    logs = corpus.write_logs(tmp_path, broken=False)
    files = sorted([*sample_dir().glob("*.jsonl"), *logs.glob("*.jsonl")])
    with Recall.open(tmp_path / "embedded") as embedded:
        embedded.ingest(files)
        expected = _pages(embedded)
    worker = worker_factory()
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        recall.ingest(files)
        wait_indexed(recall, expected_counts(files), worker)
        got = _pages(recall)
        for path in PAGES:
            assert got[path] == expected[path], path
        assert "<mark>Traceback</mark>" in got["/search?q=Traceback"]
        # dead letters come from the dead-letter topic (nothing was parked here)
        client = TestClient(create_app(recall), base_url="http://127.0.0.1")
        page = client.get("/dead-letters")
        assert page.status_code == 200 and "Nothing parked." in page.text
