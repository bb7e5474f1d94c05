"""Replay, reindex and the index digest on the embedded runtime; kill -9 mid-job and resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import fleet, write_fleet

from streams.facade import Recall


def _fleet(directory: Path, sessions: int, events: int) -> list[Path]:
    return write_fleet(directory, fleet(sessions, events))


def test_reindex_swaps_generations_keeps_digest_and_stales_old_cursors(tmp_path: Path,
                                                                        samples_dir: Path) -> None:
    with Recall.open(tmp_path / "data") as recall:
        recall.ingest([samples_dir])
        before = recall.index_digest()
        page = recall.search_events("ci-billing-2025-11-24", "EUR", limit=1)
        result = recall.reindex()
        assert result["generation"] == "gen-000002" and result["previous"] == "gen-000001"
        assert recall.index_generation() == "gen-000002"
        assert result["digest"] == before["digest"] and result["eventsIndexed"] == 53
        with pytest.raises(Exception) as info:
            recall.search_events("ci-billing-2025-11-24", "EUR", limit=1,
                                 cursor=page["nextCursor"])
        assert getattr(info.value, "code", None) == "SESSION_QUERY_STALE_CURSOR"
        assert recall.replay()["digest"] == before["digest"]
        assert recall.search_sessions("KeyError")["items"][0]["bestMatch"]["seq"] == 7


def test_digest_is_independent_of_shard_count_and_ingest_order(tmp_path: Path) -> None:
    paths = _fleet(tmp_path / "logs", 6, 12)
    digests = []
    for n, (shards, order) in enumerate([(1, paths), (8, list(reversed(paths))), (3, paths)]):
        with Recall.open(tmp_path / f"d{n}", shards=shards) as recall:
            for path in order:
                recall.ingest([path])
            digests.append(recall.index_digest())
    assert digests[0] == digests[1] == digests[2]
    assert digests[0]["sessions"] == 6 and digests[0]["events"] == 72


def _run_cli(data: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streams", "--data-dir", str(data), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.chaos
def test_kill_minus_nine_during_ingest_and_reindex_then_resume(tmp_path: Path) -> None:
    """SIGKILL ingest and reindex at random points; after resuming, the digest equals a clean
    build of the same events: nothing lost, nothing duplicated."""
    paths = _fleet(tmp_path / "logs", 120, 60)
    with Recall.open(tmp_path / "clean") as recall:
        recall.ingest(paths)
        expected = recall.index_digest()
    data = tmp_path / "data"
    rng = random.Random(7)
    kills = 0
    for job in ["ingest"] * 3 + ["reindex"] * 3:
        args = ["ingest", str(tmp_path / "logs")] if job == "ingest" else ["reindex"]
        # wait until the job is visibly under way, then kill it a random moment later
        started = ((lambda: any((data / "store").glob("*.jsonl"))) if job == "ingest"
                   else (lambda: (data / "index" / "BUILDING").exists()))
        before = {p.name for p in (data / "store").glob("*.jsonl")} if job == "ingest" else set()
        proc = _run_cli(data, *args)
        deadline = time.time() + 30
        while proc.poll() is None and time.time() < deadline and not (
                started() and (job != "ingest" or
                               {p.name for p in (data / "store").glob("*.jsonl")} - before)):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
    for args in (["ingest", str(tmp_path / "logs"), "--json"], ["reindex", "--json"]):
        done = _run_cli(data, *args)
        out, err = done.communicate(timeout=120)
        assert done.returncode == 0, (out + err).decode()
    with Recall.open(data) as recall:
        assert recall.index_digest() == expected
    assert kills >= 3  # the test must actually have interrupted jobs midway
