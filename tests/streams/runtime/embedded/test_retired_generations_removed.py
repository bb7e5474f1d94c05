"""A generation a reindex retired (a full index copy) is deleted once RECALL_SNAPSHOT_RETENTION_S
has passed, by the next command that writes (or the watcher's next batch), not only by the next
reindex or replay."""

from __future__ import annotations

import time
from pathlib import Path

from datadirs import SAMPLES, recall_cmd, recall_env
from factories import header, user

from projections.codec import dumps


def _generations(data: Path) -> set[str]:
    return {p.name for p in (data / "index").glob("gen-*") if p.is_dir()}


def test_a_retired_generation_goes_at_the_next_write_after_its_retention(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = recall_env(RECALL_SNAPSHOT_RETENTION_S="1")
    assert recall_cmd(data, "ingest", str(SAMPLES), env=env).returncode == 0
    (first,) = _generations(data)
    assert recall_cmd(data, "reindex", env=env).returncode == 0
    assert first in _generations(data)  # retired, kept for the snapshot readers' window
    time.sleep(1.5)
    log = tmp_path / "later.jsonl"
    log.write_bytes(dumps(header("later-1", cwd="/w")) + b"\n" + dumps(user(0, "hi")) + b"\n")
    assert recall_cmd(data, "ingest", str(log), env=env).returncode == 0
    assert first not in _generations(data) and len(_generations(data)) == 1
