"""`recall ingest` over Kafka of the Pi, Continue, Roo Code, Kimi CLI, OpenHands and Crush
excerpts publishes what the embedded ingest stores, also when they grow: a Kimi file dated from
its modification time (resumed after what was published, first header kept) and a Crush database
written by a live connection in WAL mode (only the new message)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from streams.core.settings import Settings
from streams.facade import Recall
from tests.integration.kafkaio import WorkerProcess
from tests.integration.test_kafka_contract import wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

AGENTS = Path(__file__).resolve().parents[1] / "data" / "agents"
KIMI = AGENTS / "kimi-cli" / "00d5060aaec3fda180930ea52304b87b" / \
    "d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl"
MTIME_NS = 1_761_843_428_000_000_000


def _tree(root: Path) -> tuple[Path, Path]:
    """The excerpts placed as their agents keep them; the Kimi file cut to 20 lines."""
    for name in ("pi", "continue", "roo-code", "openhands"):
        shutil.copytree(AGENTS / name, root / name, ignore=shutil.ignore_patterns("README.md"))
    crush = root / "project" / ".crush" / "crush.db"
    crush.parent.mkdir(parents=True)
    shutil.copy(AGENTS / "crush" / ".crush" / "crush.db", crush)
    kimi = root / "kimi" / KIMI.name
    kimi.parent.mkdir(parents=True)
    kimi.write_bytes(b"".join(KIMI.read_bytes().splitlines(keepends=True)[:20]))
    os.utime(kimi, ns=(MTIME_NS, MTIME_NS))
    return kimi, crush


def test_kafka_ingest_of_the_new_agents_equals_the_embedded_ingest(
        settings: Settings, worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    cap = 1 << 20
    settings = settings.model_copy(update={"max_event_bytes": cap})
    local = settings.model_copy(update={"broker": None, "data_dir": tmp_path / "embedded"})
    worker = worker_factory(RECALL_MAX_EVENT_BYTES=cap)
    # Both runtimes read the same files: the embedded ingest first, then Kafka, each step.
    root = tmp_path / "agents"
    kimi, crush = _tree(root)
    writer = apsw.Connection(str(crush))  # Crush, holding its database open (WAL)
    try:
        with Recall.open(settings=local) as embedded, \
                Recall.connect(str(settings.broker), settings=settings) as kafka:
            for step in (1, 2):
                if step == 2:
                    kimi.write_bytes(KIMI.read_bytes())
                    os.utime(kimi, ns=(MTIME_NS + 60 * 10**9,) * 2)
                    writer.execute(
                        "INSERT INTO messages (id, session_id, role, parts, model, created_at, "
                        "updated_at, finished_at, provider) VALUES ('m-new', "
                        "'f306c145-4c83-492c-b575-739c30bbced4', 'user', ?, NULL, 1755891900, "
                        "1755891900, NULL, NULL)",
                        ('[{"type":"text","data":{"text":"and now the README"}},'
                         '{"type":"finish","data":{"reason":"stop","time":0}}]',))
                theirs = embedded.ingest([root]).to_json()
                ours = kafka.ingest([root]).to_json()
                for report in (ours, theirs):
                    assert report["rejected"] == 0 and report["rewritten"] == [], (step, report)
                assert ours["eventsAdded"] == theirs["eventsAdded"] > 0, (step, ours, theirs)
                assert ours["accounting"] == theirs["accounting"], (step, ours, theirs)
            counts = {s["header"]["id"]: len(embedded.read_session(s["header"]["id"])["events"])
                      for s in embedded.list_sessions()}
            assert {sid.split(":", 1)[0] for sid in counts} == {
                "pi", "continue", "roo-code", "kimi-cli", "openhands", "crush"}
            wait_indexed(kafka, counts, worker)
            assert [d["code"] for d in kafka.dead_letters()] == []
            assert kafka.index_digest() == embedded.index_digest()
    finally:
        writer.close()
