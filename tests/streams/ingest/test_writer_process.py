"""A bulk ingest writes the index through a writer process (indexer/writerproc.py) and builds
exactly the index the in-process writer thread builds: the same digest after a first ingest
and after a grown one, whichever path each ingest took (the parent forgets its writer caches
after the child wrote, so its own later writes continue the child's ids and extents). An
error in the child reaches the caller as the same error, fields and all."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest

from bench.corpus import TextGen
from bench.search_corpus import write_session
from indexer import IndexConfig, ShardSet
from indexer.digest import index_digest
from indexer.errors import SourceConflict
from indexer.writerproc import WriterProcess
from projections.records import EventRecord
from streams.facade import Recall
from streams.runtime.embedded import runtime as runtime_module

from ...indexer.helpers import texts_session


def _corpus(root: Path, first: int, count: int, events: int = 120) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    gen = TextGen(first + 3)
    for i in range(first, first + count):
        write_session(root / f"s-{i:03d}.jsonl", f"s-{i:03d}", i, events, gen, compact_at=20)
    return root


def _digest(recall: Recall) -> bytes:
    return orjson.dumps(index_digest(recall.backend.runtime.shards),
                        option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("paths", [("process", "process"), ("process", "thread"),
                                   ("thread", "process")])
def test_the_writer_process_builds_the_index_the_writer_thread_builds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paths: tuple[str, str]) -> None:
    first = _corpus(tmp_path / "first", 0, 6)
    grown = _corpus(tmp_path / "grown", 6, 4)
    # a session of the first part grows: appended events continue its extents and blocks
    extra = tmp_path / "first" / "s-000.jsonl"
    lines = extra.read_bytes().splitlines()
    longer = tmp_path / "s-000-longer.jsonl"
    write_session(longer, "s-000", 0, 300, TextGen(3), compact_at=20)
    assert longer.read_bytes().splitlines()[:len(lines)] == lines  # the same session, grown
    digests = []
    for mode in (("thread", "thread"), paths):
        # one process throughout: what it cached while one path wrote must not mislead the other
        with Recall.open(tmp_path / f"data-{'-'.join(mode)}") as recall:
            for part, how in zip((first, grown), mode, strict=True):
                monkeypatch.setattr(runtime_module, "WRITER_PROCESS_BYTES",
                                    0 if how == "process" else 1 << 60)
                report = recall.ingest([part])
                assert report.events_added and not report.rejected
            extra.write_bytes(longer.read_bytes())
            monkeypatch.setattr(runtime_module, "WRITER_PROCESS_BYTES", 1 << 60)
            assert recall.ingest([first]).events_added == 180  # a new extent, too
            digests.append(_digest(recall))
        extra.write_bytes(b"\n".join(lines) + b"\n")
    assert digests[0] == digests[1]


def test_an_error_in_the_writer_process_reaches_the_caller_as_raised(tmp_path: Path) -> None:
    root = tmp_path / "index"
    config = IndexConfig(shards=2)
    ShardSet(root, config).close()
    records = texts_session("alpha", ["one", "two"])
    writer = WriterProcess(root, config, None)
    try:
        assert writer.write(records, {"src": 2}) is True
        assert writer.write(records, {"src": 2}) is False  # a replay changes nothing
        event = records[-1]
        assert isinstance(event, EventRecord)
        changed = event._replace(raw=event.raw.replace(b"two", b"TWO"))
        with pytest.raises(SourceConflict) as caught:
            writer.write([changed], {})
        assert (caught.value.session_id, caught.value.seq) == ("alpha", event.seq)
        assert writer.write(texts_session("beta", ["three"]), {}) is True  # it goes on
    finally:
        writer.close()
    with ShardSet(root, config) as shards:
        assert shards.tracking_position("src") == 2


def test_the_writer_process_outlives_a_ctrl_c_and_ends_with_its_input(tmp_path: Path) -> None:
    root = tmp_path / "index"
    config = IndexConfig(shards=2)
    ShardSet(root, config).close()
    writer = WriterProcess(root, config, None)
    try:
        writer._proc.send_signal(signal.SIGINT)  # as Ctrl-C sends it to the process group
        assert writer.write(texts_session("alpha", ["one"]), {}) is True
        assert writer._proc.poll() is None
    finally:
        writer.close()
    assert writer._proc.returncode == 0
