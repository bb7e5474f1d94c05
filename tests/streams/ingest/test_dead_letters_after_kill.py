"""Parking is idempotent: dead letters are keyed by source, position and content, so a run killed
(kill -9) after parking records but before saving its progress, then re-run, parks nothing twice;
a torn last record is repaired by the re-run."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

from datadirs import dead_letters, recall_cmd, snapshot, spawn_recall, write_corpus


def test_a_rerun_after_lost_progress_parks_nothing_twice(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_corpus(corpus, 9, 20)
    data = tmp_path / "data"
    assert recall_cmd(data, "ingest", str(corpus)).returncode == 0
    clean = len(dead_letters(data))
    assert clean == 3
    (data / "sources.json").unlink()  # what a kill before the registry save leaves
    with (data / "dead-letter.jsonl").open("ab") as f:
        f.write(b'{"key":"torn-by-a-cra')  # and a record torn mid-write
    again = recall_cmd(data, "ingest", str(corpus), "--json")
    assert again.returncode == 0
    assert len(dead_letters(data)) == clean


def test_kill_9_at_random_points_then_rerun_gives_the_clean_dead_letters(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_corpus(corpus, 40, 1000)
    clean = tmp_path / "clean"
    assert recall_cmd(clean, "ingest", str(corpus)).returncode == 0
    data = tmp_path / "data"
    rng = random.Random(13)
    for _ in range(4):
        proc = spawn_recall(data, "ingest", str(corpus))
        time.sleep(rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert recall_cmd(data, "ingest", str(corpus)).returncode == 0
    assert len(dead_letters(data)) == len(dead_letters(clean)) == 14
    assert snapshot(data) == snapshot(clean)
