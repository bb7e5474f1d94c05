"""The index digest (indexer/digest.py, indexer/digester.py): the fast digest — one decoding per
event, one query per session, shards in helper processes — equals its first definition (kept
here as `reference_digest`) for every index; helpers that fail or die change nothing."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import assistant, checkpoint, log_only, tool_result, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import indexer.digest
from indexer import IndexConfig, ShardSet, digester
from indexer.blocks import read_raws
from indexer.digest import combine_digests, index_digest, session_digests, substring_coverage
from indexer.eventrows import session_rows
from indexer.shard import Shard
from indexer.writer import text_of
from projections.fold import encode_state, fold_surface
from projections.records import IndexRecord

from .helpers import session_records


def reference_digest(shards: Iterable[Shard]) -> dict[str, Any]:
    """The digest's definition as first written (commit d7d6f55): per session, its header,
    each event's [seq, type, time, surface, text] and the re-derived fold state; the substring
    index's coverage was added to it later."""
    shards = list(shards)
    out: dict[str, list[Any]] = {}
    for shard in shards:
        with shard.reader() as conn:
            conn.execute("BEGIN")
            try:
                sessions = conn.execute("SELECT no, id, header FROM sessions"
                                        " WHERE header IS NOT NULL ORDER BY no").fetchall()
                for no, sid, header in sessions:
                    session = hashlib.blake2b(digest_size=32)
                    canonical = orjson.dumps(orjson.loads(header), option=orjson.OPT_SORT_KEYS)
                    session.update(orjson.dumps(str(sid)) + b"\n" + canonical + b"\n")
                    rows = session_rows(conn, int(no))
                    raws_by_seq = read_raws(conn, shard.epoch, ((int(no), r.seq) for r in rows))
                    raws = []
                    for r in rows:
                        raw = raws_by_seq[(int(no), r.seq)]
                        session.update(orjson.dumps([r.seq, r.type, r.time, r.surface,
                                                     text_of(raw)]) + b"\n")
                        raws.append(orjson.loads(raw))
                    state = encode_state(fold_surface(raws).state)
                    session.update(orjson.dumps({k: state[k].decode() for k in sorted(state)}))
                    out[str(sid)] = [session.hexdigest(), len(raws)]
            finally:
                conn.execute("COMMIT")
    return combine_digests([out], substring_coverage(shards))


@st.composite
def logs(draw: st.DrawFn, max_events: int = 40) -> list[dict[str, Any]]:
    """Valid logs: messages, tool results, log-only events and compactions (fold state with
    replacements), texts with any characters."""
    events: list[dict[str, Any]] = []
    nodes: list[int] = []
    for seq in range(draw(st.integers(0, max_events))):
        choice = draw(st.sampled_from(["user", "assistant", "tool", "log", "compact"]))
        text = draw(st.text(max_size=20))
        if choice == "compact" and nodes:
            i = draw(st.integers(0, len(nodes) - 1))
            j = draw(st.integers(i, len(nodes) - 1))
            events.append(checkpoint(seq, text, nodes[i], nodes[j], nodes[i:j + 1]))
            nodes[i:j + 1] = [seq]
        elif choice in ("log", "compact"):
            events.append(log_only(seq, draw(st.sampled_from(["turn/start", "step/end"]))))
        else:
            events.append({"user": user, "assistant": assistant,
                           "tool": tool_result}[choice](seq, text))
            nodes.append(seq)
    return events


def build(root: Path, sessions: dict[str, list[dict[str, Any]]], *, shards: int = 3,
          chunks: int = 3, headless: Iterable[str] = ()) -> ShardSet:
    """An index of `sessions`, each session's records written in `chunks` batches interleaved
    with the other sessions' (several extents and blocks per session); `headless` sessions
    lose their header record (events without a header are not digested)."""
    per_session: list[list[IndexRecord]] = []
    for sid, events in sessions.items():
        records = session_records(sid, events)
        per_session.append(records[1:] if sid in headless else records)
    shard_set = ShardSet(root, IndexConfig(shards=shards))
    for part in range(chunks):
        batch: list[IndexRecord] = []
        for records in per_session:
            size = -(-len(records) // chunks)
            batch.extend(records[part * size:(part + 1) * size])
        shard_set.write_batch(batch, {})
    return shard_set


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(logs(), min_size=1, max_size=5), st.integers(1, 4), st.integers(1, 3))
def test_fast_digest_equals_the_reference(tmp_path_factory: pytest.TempPathFactory,
                                          session_logs: list[list[dict[str, Any]]],
                                          shards: int, chunks: int) -> None:
    sessions = {f"s{i}": events for i, events in enumerate(session_logs)}
    with build(tmp_path_factory.mktemp("idx"), sessions, shards=shards, chunks=chunks,
               headless=["s1"]) as shard_set:
        expected = reference_digest(shard_set)
        assert index_digest(shard_set, parallel=False) == expected
        assert index_digest(shard_set, parallel=True) == expected


def _large(root: Path) -> ShardSet:
    sessions = {f"big{i}": [user(s, f"word{s % 7} session {i} event {s}") if s % 3 else
                            tool_result(s, f"out {i} {s}") for s in range(60)]
                for i in range(12)}
    return build(root, sessions, shards=4)


def test_helpers_digest_each_shard_as_the_caller_does(tmp_path: Path) -> None:
    with _large(tmp_path / "i") as shard_set:
        expected = reference_digest(shard_set)
        per_shard = [session_digests([s], parallel=False) for s in shard_set.shards]
        by_helpers = digester.digest_files([os.fspath(s.path) for s in shard_set.shards])
        assert by_helpers == per_shard
        assert index_digest(shard_set, parallel=True) == expected
        assert combine_digests((session_digests([s], parallel=True) for s in shard_set.shards),
                               substring_coverage(shard_set.shards)) == expected


def test_a_large_index_goes_to_the_helpers_by_default(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    real = digester.digest_files

    def spy(paths: list[str]) -> Any:
        asked.append(list(paths))
        return real(paths)

    monkeypatch.setattr(digester, "digest_files", spy)
    with _large(tmp_path / "i") as shard_set:
        index_digest(shard_set)
        assert asked == []  # a small index is digested in the caller
        monkeypatch.setattr(indexer.digest, "PARALLEL_MIN_BYTES", 1)
        assert index_digest(shard_set) == reference_digest(shard_set)
        assert asked == [[os.fspath(s.path) for s in shard_set.shards]]


def test_a_dead_helper_is_replaced_and_changes_nothing(tmp_path: Path) -> None:
    with _large(tmp_path / "i") as shard_set:
        expected = reference_digest(shard_set)
        assert index_digest(shard_set, parallel=True) == expected
        for helper in list(digester._idle):
            helper.process.kill()
            helper.process.wait()
        assert index_digest(shard_set, parallel=True) == expected
        assert digester._idle and all(h.alive() for h in digester._idle)


def test_a_damaged_shard_fails_as_it_does_without_helpers(tmp_path: Path) -> None:
    with _large(tmp_path / "i") as shard_set:
        shard_set.shards[1].writer.execute("DELETE FROM blocks WHERE id IN"
                                           " (SELECT id FROM blocks LIMIT 1)")
        with pytest.raises(KeyError) as in_caller:
            index_digest(shard_set, parallel=False)
        with pytest.raises(KeyError) as by_helpers:
            index_digest(shard_set, parallel=True)
        assert by_helpers.value.args == in_caller.value.args


def test_helpers_die_with_the_process_that_started_them(tmp_path: Path) -> None:
    with _large(tmp_path / "i"):
        pass
    script = ("import sys, time\nfrom pathlib import Path\nfrom indexer import IndexConfig, "
              "ShardSet, digester\nfrom indexer.digest import index_digest\n"
              f"s = ShardSet(Path({str(tmp_path / 'i')!r}), IndexConfig(shards=4))\n"
              "index_digest(s, parallel=True)\n"
              "print(*[h.process.pid for h in digester._idle], flush=True)\ntime.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert pids and all(_running(p) for p in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
