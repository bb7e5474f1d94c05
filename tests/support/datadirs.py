"""Hostile-input and concurrency tests: real `recall` processes, corpora, and data-dir snapshots.

`snapshot(data_dir)` is what "equal to one clean ingest" means: the store's files byte for byte,
the dead letters (without their `at` time) and the index digest.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from factories import assistant, header, user

ROOT = Path(__file__).resolve().parents[2]
REALDATA = ROOT / "tests" / "data" / "realdata"
SAMPLES = ROOT / "streams" / "samples"


def recall_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def recall_cmd(data: Path, *args: str | bytes, env: dict[str, str] | None = None,
               timeout: float = 300, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `recall --data-dir DATA ARGS…` as its own process (argv may hold raw bytes)."""
    argv: list[str | bytes] = [sys.executable, "-m", "streams", "--data-dir", str(data), *args]
    return subprocess.run(argv, capture_output=True, timeout=timeout, env=env or recall_env(),
                          input=stdin, cwd=ROOT)


def spawn_recall(data: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streams", "--data-dir", str(data), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env or recall_env(), cwd=ROOT)


def write_corpus(directory: Path, sessions: int, events: int, *, bad_every: int = 3) -> list[Path]:
    """Native logs with a malformed line in every `bad_every`-th file (so there are dead letters)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(sessions):
        sid = f"corpus-{s:03d}"
        lines = [header(sid, cwd=f"/w/{s % 3}", created_at=1_700_000_000_000 + s)]
        lines += [(user if i % 2 == 0 else assistant)(i, f"corpus {s} event {i} needle{i % 7}")
                  for i in range(events)]
        data = b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
        if bad_every and s % bad_every == 0:
            data += b"{not json\n"
        path = directory / f"s{s:03d}.jsonl"
        path.write_bytes(data)
        paths.append(path)
    return paths


def dead_letters(data: Path) -> list[dict[str, Any]]:
    path = data / "dead-letter.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def index_digest(data: Path) -> str:
    from streams.facade import Recall

    with Recall.open(data) as recall:
        return str(recall.index_digest()["digest"])


def snapshot(data: Path) -> dict[str, Any]:
    store = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted((data / "store").glob("*.jsonl"))}
    letters = sorted(orjson.dumps({k: v for k, v in d.items() if k != "at"})
                     for d in dead_letters(data))
    return {"store": store, "deadLetters": letters, "digest": index_digest(data)}


def parked_bytes(letter: dict[str, Any]) -> bytes | None:
    value = letter.get("bytes")
    return None if value is None else base64.b64decode(value)
