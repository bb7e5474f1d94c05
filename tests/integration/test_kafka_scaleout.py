"""Integration: two workers split the partitions; a search still covers every shard; when one
stops, its partitions move and the new owner rebuilds the shards from `<p>.documents`."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from contract import answers, embedded_expectation
from factories import header, user

from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.topics import Topics
from tests.integration.kafkaio import WorkerProcess, indexed_shards, publish
from tests.integration.test_kafka_contract import expected_counts, wait_indexed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def test_two_workers_split_partitions_and_survive_one_leaving(
        settings: Settings, worker_factory: Callable[[], WorkerProcess], tmp_path: Path) -> None:
    files, expected, _ = embedded_expectation(tmp_path)
    first, second = worker_factory(), worker_factory()
    # both index roles read partitions of their own before anything is published (the
    # pipeline is fast enough that one worker alone would index everything otherwise)
    documents = Topics.of(settings).documents
    _until(lambda: all(_reading(w, documents) for w in (first, second))
           and _reading(first, documents) != _reading(second, documents), first)
    with Recall.connect(str(settings.broker), settings=settings) as recall:
        recall.ingest(files)
        wait_indexed(recall, expected_counts(files), first)
        assert orjson.dumps(answers(recall)) == orjson.dumps(expected)
        # each worker indexed only its own partitions: the shards are split between them
        owned = [indexed_shards(tmp_path / f"data-{n}") for n in (0, 1)]
        assert owned[0] and owned[1] and not owned[0] & owned[1], owned
        # one worker leaves; the other takes its partitions over and rebuilds those shards
        assert second.stop(signal.SIGTERM) == 0
        late = tmp_path / "late.jsonl"
        late.write_bytes(b"\n".join(orjson.dumps(x) for x in [
            header("late-session", cwd="/w/late"), user(0, "zebra after the move")]) + b"\n")
        recall.ingest([late])
        wait_indexed(recall, {**expected_counts(files), "late-session": 1}, first, 120)
        hits = recall.search_sessions("zebra after the move")["items"]
        assert [h["header"]["id"] for h in hits] == ["late-session"]
        # after the move the answers still equal the embedded runtime's (plus the new session)
        again = answers(recall)
        assert sorted(again.pop("list_sessions")) == sorted([*expected["list_sessions"],
                                                             "late-session"])
        assert again == {k: v for k, v in expected.items() if k != "list_sessions"}
        # every existing session takes one more event: the new owner of each moved partition
        # recovered the fold state from the changelog, or the seq would be refused
        counts = expected_counts(files)
        publish(recall, [(sid, user(n, f"quokka {sid}")) for sid, n in counts.items()])
        wait_indexed(recall, {**{sid: n + 1 for sid, n in counts.items()}, "late-session": 1},
                     first, 120)
        assert len(recall.search_sessions("quokka", limit=100)["items"]) == len(counts)
        # the remaining worker now holds every shard, the moved ones rebuilt from documents
        assert indexed_shards(tmp_path / "data-0") == owned[0] | owned[1]


def _reading(worker: WorkerProcess, topic: str) -> list[int] | None:
    """The partitions of `topic` the worker's index role said it reads last (None: none yet)."""
    last = None
    for line in worker.log_path.read_text(errors="replace").splitlines():
        if f"{topic}: reading partitions " in line:
            last = orjson.loads(line.split("reading partitions ", 1)[1].split(" (from")[0])
    return last or None


def _until(condition: Callable[[], bool], worker: WorkerProcess, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, worker.log_tail()
        time.sleep(0.2)
