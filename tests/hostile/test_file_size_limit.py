"""An ingest cut short by a write failure (EFBIG under a file size limit, as `ulimit -f` sets)
does not wedge the data dir: every later command works, `index check` is clean, and running the
same ingest again completes to the digest of an ingest that never failed."""

from __future__ import annotations

import random
import resource
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from datadirs import ROOT

WORDS = ["alpha", "beta", "gamma", "delta", "kafka", "index", "shard", "query", "token"]


def _corpus(folder: Path, sessions: int = 12, events: int = 250) -> Path:
    rng = random.Random(6)
    folder.mkdir()
    for s in range(sessions):
        sid = f"s{s:03d}"
        lines = [{"type": "session", "version": 0, "id": sid, "cwd": "/w", "createdAt": 1}]
        for i in range(events):
            text = " ".join(rng.choice(WORDS) for _ in range(30)) + f" {rng.random()}"
            lines.append({"type": "user/message", "seq": i, "time": 1000 + i,
                          "surfaceOp": "append",
                          "data": {"id": f"m{i}", "role": "user", "source": {"kind": "user"},
                                   "content": [{"type": "text", "text": text}]}})
        (folder / f"{sid}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return folder


def _recall(data: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[bytes]:
    def cap() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "streams", "--data-dir", str(data), *args],
                          capture_output=True, cwd=ROOT, timeout=300,
                          preexec_fn=cap if limit is not None else None)


def _digest(data: Path) -> str:
    run = _recall(data, "index", "digest", "--json")
    assert run.returncode == 0, run.stderr
    return str(orjson.loads(run.stdout)["digest"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory.mktemp("efbig") / "src")


@pytest.fixture(scope="module")
def clean_digest(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    data = tmp_path_factory.mktemp("clean") / "data"
    assert _recall(data, "ingest", str(corpus), "--json").returncode == 0
    return _digest(data)


@pytest.mark.parametrize("limit_kib", [16, 64, 150, 250, 350])
def test_a_write_failure_mid_ingest_leaves_a_data_dir_that_recovers(
        tmp_path: Path, corpus: Path, clean_digest: str, limit_kib: int) -> None:
    data = tmp_path / "data"
    cut = _recall(data, "ingest", str(corpus), "--json", limit=limit_kib * 1024)
    assert cut.returncode == 1  # the limit is hit mid-ingest
    for args in (["sessions", "--json"], ["index", "check"]):
        run = _recall(data, *args)
        assert run.returncode == 0, (args, run.stdout, run.stderr)
    again = _recall(data, "ingest", str(corpus), "--json")
    assert again.returncode == 0, again.stdout
    assert _recall(data, "index", "check").returncode == 0
    assert _digest(data) == clean_digest
