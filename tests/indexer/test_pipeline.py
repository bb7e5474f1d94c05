"""The writer thread (indexer/pipeline.py): same index as synchronous writes, submission order
kept, errors reach the caller with everything before them committed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import indexer.pipeline
from indexer import IndexConfig, ShardSet
from indexer.digest import index_digest
from indexer.errors import SourceConflict
from indexer.pipeline import WriterThread, merge

from .helpers import texts_session


def _batches() -> list[Any]:
    out = []
    for s in range(12):
        recs = texts_session(f"s{s:02d}", [f"needle {s} {i}" for i in range(7)])
        out += [(recs[:3], {f"store:s{s:02d}": 2}), (recs[3:], {f"store:s{s:02d}": 7})]
    return out


@pytest.mark.parametrize(("group", "process"), [(1, False), (3, False), (10_000, False),
                                              (1, True), (3, True)])
def test_pipelined_writes_build_the_synchronous_index(tmp_path: Path, group: int, process: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", group)
    with ShardSet(tmp_path / "sync", IndexConfig(shards=3)) as sync, \
            ShardSet(tmp_path / "piped", IndexConfig(shards=3)) as piped:
        for records, positions in _batches():
            sync.write_batch(records, positions)
        with piped.pipeline(process=process):
            for records, positions in _batches():
                piped.submit(records, positions)
        assert index_digest(piped) == index_digest(sync)
        assert piped.tracking_position("store:s05") == 7


@pytest.mark.parametrize(("group", "process"), [(20_000, False), (20_000, True), (5, True)])
def test_an_error_surfaces_after_the_batches_before_it_commit(
        tmp_path: Path, group: int, process: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", group)
    batches = _batches()
    conflict = texts_session("s00", ["different text"])[1:]
    with ShardSet(tmp_path / "i", IndexConfig(shards=2)) as shards:
        with pytest.raises(SourceConflict), shards.pipeline(process=process):
            for records, positions in batches[:4]:
                shards.submit(records, positions)
            shards.submit(conflict, {"p": 1})
            for records, positions in batches[4:]:
                shards.submit(records, positions)
        assert shards.tracking_position("store:s01") == 7  # before the conflict: written
        assert shards.tracking_position("p") is None


def test_write_batch_inside_a_pipeline_keeps_submission_order(tmp_path: Path) -> None:
    with ShardSet(tmp_path / "i", IndexConfig(shards=2)) as shards, shards.pipeline():
        records = texts_session("s", ["one", "two"])
        shards.submit(records[:2], {"store:s": 1})
        # the second half depends on the first (seq 1 follows seq 0): applied after it
        assert shards.write_batch(records[2:], {"store:s": 2}) is True
        assert shards.tracking_position("store:s") == 2


def test_the_writer_really_runs_on_another_thread() -> None:
    seen: list[str] = []
    done = threading.Event()

    def write(records: Any, positions: Any) -> None:
        seen.append(threading.current_thread().name)
        done.set()

    writer = WriterThread(write)
    writer.submit([], {})
    assert done.wait(5)
    writer.close()
    assert seen == ["recall-index-writer"]


def test_merged_batches_keep_order_and_the_furthest_positions() -> None:
    a, b = texts_session("a", ["x"]), texts_session("b", ["y"])
    records, positions = merge([(a, {"p": 3, "q": 1}), (b, {"p": 2, "r": 5})])
    assert records == [*a, *b]
    assert positions == {"p": 3, "q": 1, "r": 5}


class _Remote:
    """An Overlapped write whose answers wait until the test releases them."""

    def __init__(self, fail: str | None = None) -> None:
        self.sent: list[list[str]] = []
        self.written: list[list[str]] = []
        self.release = threading.Semaphore(0)
        self.fail = fail

    def prepare(self, records: Any, positions: Any) -> list[str]:
        return sorted(positions)

    def send(self, request: list[str]) -> None:
        self.sent.append(request)

    def result(self) -> bool:
        assert self.release.acquire(timeout=5)
        return self._outcome()

    answered = False

    def ready(self) -> bool:
        return self.answered

    def _outcome(self) -> bool:
        request = self.sent[-1]
        if self.fail is not None and self.fail in request:
            raise SourceConflict("conflict", session_id="x", seq=0)
        self.written.append(request)
        return True

    def write(self, records: Any, positions: Any) -> bool:
        """The retry's write, answered at once."""
        self.send(self.prepare(records, positions))
        return self._outcome()


def test_the_next_group_is_prepared_while_one_is_in_flight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_RECORDS", 1)
    remote = _Remote()
    prepared = threading.Event()
    writer = WriterThread(remote.write, overlapped=remote)
    writer.submit(texts_session("a", ["x"]), {"a": 1})
    writer.submit(texts_session("b", ["y"]), {"b": 1}, before=prepared.set)
    # b's source is made durable while a is still unanswered, and b waits to be sent
    assert prepared.wait(5)
    assert remote.sent == [["a"]]
    remote.release.release()
    remote.release.release()
    writer.close()
    assert remote.written == [["a"], ["b"]]


def test_an_overlapped_failure_is_retried_batch_by_batch_and_sends_nothing_after() -> None:
    remote = _Remote(fail="bad")
    writer = WriterThread(remote.write, overlapped=remote)
    for name in ("a", "bad", "c"):
        writer.submit(texts_session(name, ["x"]), {name: 1})
    remote.release.release()  # the three as one group (GROUP_WAIT_S), which fails
    with pytest.raises(SourceConflict):
        writer.close()
    assert remote.sent == [["a", "bad", "c"], ["a"], ["bad"]]
    assert remote.written == [["a"]]


def test_a_group_waits_for_more_batches_while_the_one_before_is_applied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer.pipeline, "GROUP_WAIT_S", 0.01)
    remote = _Remote()
    writer = WriterThread(remote.write, overlapped=remote)
    writer.submit(texts_session("a", ["x"]), {"a": 1})
    deadline = time.monotonic() + 5
    while not remote.sent and time.monotonic() < deadline:
        time.sleep(0.005)
    writer.submit(texts_session("b", ["y"]), {"b": 1})
    time.sleep(0.2)  # far past GROUP_WAIT_S, and a is still unanswered
    writer.submit(texts_session("c", ["z"]), {"c": 1})
    time.sleep(0.05)
    assert remote.sent == [["a"]]
    remote.answered = True
    remote.release.release()
    remote.release.release()
    writer.close()
    assert remote.written == [["a"], ["b", "c"]]
