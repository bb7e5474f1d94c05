"""A read-only data dir (a read-only mount, a copy another user owns): reads work, and `index
check` says "read-only" instead of calling every shard damaged and suggesting a reindex that
cannot run there. As root (whom permissions do not stop) the reads run as `nobody` on a copy
`nobody` owns and cannot write."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from datadirs import ROOT, SAMPLES

from streams.facade import Recall

NOBODY = 65534


def _walk(root: Path) -> Iterator[Path]:
    yield root
    yield from root.rglob("*")


@pytest.fixture
def frozen() -> Iterator[Path]:
    """A data dir with sessions, made read-only for the process that reads it."""
    base = Path(tempfile.mkdtemp(prefix="recall-ro-"))
    os.chmod(base, 0o755)  # nobody must reach it
    data = base / "data"
    with Recall.open(data) as recall:
        recall.ingest([SAMPLES])
    (base / "state").mkdir()
    for path in _walk(data):
        os.chmod(path, 0o500 if path.is_dir() else 0o400)
    if os.geteuid() == 0:
        for path in [*_walk(data), base / "state"]:
            os.chown(path, NOBODY, NOBODY)
    try:
        yield data
    finally:
        for path in _walk(data):
            os.chmod(path, 0o700)
        shutil.rmtree(base)


def _recall(data: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "streams", "--data-dir", str(data), *args]
    if os.geteuid() == 0:
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                   *command]
    env = {**os.environ, "XDG_STATE_HOME": str(data.parent / "state"), "HOME": str(data.parent)}
    return subprocess.run(command, capture_output=True, cwd=ROOT, timeout=120, env=env)


def test_reads_work_and_check_says_read_only(frozen: Path) -> None:
    for args in (["sessions", "--json"], ["search", "invoice", "--json"],
                 ["index", "digest", "--json"], ["index", "stats", "--json"]):
        run = _recall(frozen, *args)
        assert run.returncode == 0, (args, run.stdout[-400:], run.stderr[-400:])
    sessions = orjson.loads(_recall(frozen, "sessions", "--json").stdout)
    assert sessions
    checked = _recall(frozen, "index", "check", "--json")
    report = orjson.loads(checked.stdout)
    assert checked.returncode == 0 and report["ok"] and report["readOnly"], report
    assert report["problems"] == [] and report["fix"] is None
    text = _recall(frozen, "index", "check").stdout.decode()
    assert "read-only" in text and "DAMAGED" not in text
    stats = orjson.loads(_recall(frozen, "index", "stats", "--json").stdout)
    assert all(row["problems"] == [] for row in stats)
