"""A damaged index (truncated shard files, a broken `CURRENT`) is reported by `recall index
check`, reads fail with RECALL_INDEX_DAMAGED (not "database disk image is malformed"), and
`recall reindex` / `recall replay` rebuild it from the store, moving the damaged files aside."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from datadirs import SAMPLES, index_digest

from streams.faces.cli.main import main


def cli(data: Path, *args: str) -> tuple[int, object]:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, orjson.loads(result.stdout)


def _damage(data: Path) -> Path:
    live = data / "index" / (data / "index" / "CURRENT").read_text().strip()
    for shard in live.glob("shard-*.sqlite"):
        with shard.open("r+b") as f:
            f.truncate(max(4096, os.path.getsize(shard) // 3))
    return live


@pytest.mark.parametrize("job", ["reindex", "replay"])
def test_reindex_and_replay_rebuild_a_damaged_index(tmp_path: Path, job: str) -> None:
    data = tmp_path / "data"
    assert cli(data, "ingest", str(SAMPLES))[0] == 0
    clean = index_digest(data)
    live = _damage(data)
    status, report = cli(data, "index", "check")
    assert status == 1 and isinstance(report, dict) and not report["ok"]
    assert report["problems"] and "reindex" in report["fix"]
    status, error = cli(data, "search", "EUR")
    assert status == 1 and isinstance(error, dict)
    assert error["error"]["code"] == "RECALL_INDEX_DAMAGED"
    status, result = cli(data, job)
    assert status == 0 and isinstance(result, dict), result
    assert result["digest"] == clean
    [moved] = result["movedAside"]
    assert (data / moved).is_dir() and not live.exists()
    assert cli(data, "index", "check")[1]["ok"] is True  # type: ignore[index]
    assert cli(data, "search", "EUR")[0] == 0


def test_a_damaged_current_pointer_is_reported_and_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "ingest", str(SAMPLES))[0] == 0
    clean = index_digest(data)
    (data / "index" / "CURRENT").write_bytes(b"\x00garbage")
    status, report = cli(data, "index", "check")
    assert status == 1 and not report["ok"]  # type: ignore[index]
    status, result = cli(data, "reindex")
    assert status == 0 and result["digest"] == clean  # type: ignore[index]
