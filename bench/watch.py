"""`recall watch` (issue 15): how long a line appended to a watched file takes to become
searchable, and what the watcher costs while nothing happens.

- `watch_to_searchable_p50_ms` / `_p99_ms` (goals ≤ 500 / ≤ 2,000 ms): a real `recall watch`
  process (default settings) follows a folder; an agent-like writer appends one line at a time
  and this process polls `search_events` (a reader, every 5 ms) until the line's unique token is
  found; the next line is written after that. Embedded mode.
- `ingest_append_p50_ms`: the floor, same run: appending a line and running the incremental
  `Recall.ingest` on the file in-process, then the same search — what any watcher must pay.
- `watch_idle_cpu_percent` (goal ≤ 1 % of a core): CPU time (utime + stime from /proc) of a
  watcher following 1,000 files in 50 folders, over 20 s with no change, after its catch-up.

Run alone: `python -m bench watch`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from projections.errors import SessionQueryError
from streams.facade import Recall

ROOT = Path(__file__).resolve().parents[1]
LINES = 200
IDLE_FILES = 1_000
IDLE_SECONDS = 20.0


def _header(session: str) -> bytes:
    return orjson.dumps({"type": "session", "version": 0, "id": session,
                         "createdAt": 1_700_000_000_000, "cwd": "/bench"}) + b"\n"


def _event(seq: int, token: str) -> bytes:
    return orjson.dumps({"type": "user/message", "seq": seq, "time": 1_700_000_000_000 + seq,
                         "data": {"id": f"m{seq}", "role": "user", "source": {"kind": "user"},
                                  "content": [{"type": "text",
                                               "text": f"agent line {seq} {token}"}]},
                         "surfaceOp": "append"}) + b"\n"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _watcher(data: Path, root: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "streams", "--data-dir", str(data), "watch",
                             str(root), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT)
    assert proc.stdout is not None
    started = orjson.loads(proc.stdout.readline())
    assert started["event"] == "started", started
    return proc


def _found(reader: Recall, session: str, token: str) -> bool:
    try:
        return bool(reader.search_events(session, token)["items"])
    except SessionQueryError:
        return False


def _wait(reader: Recall, session: str, token: str, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not _found(reader, session, token):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{token} never became searchable")
        time.sleep(0.005)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure_latency(base: Path) -> dict[str, float]:
    root, data = base / "agent", base / "data"
    root.mkdir()
    log = root / "live.jsonl"
    log.write_bytes(_header("bench-live") + _event(0, "tokstart"))
    proc = _watcher(data, root)
    waits: list[float] = []
    try:
        with Recall.open(data) as reader, log.open("ab", buffering=0) as agent:
            _wait(reader, "bench-live", "tokstart")
            for seq in range(1, LINES + 1):
                token = f"tok{seq}w"
                agent.write(_event(seq, token))
                start = time.perf_counter()
                _wait(reader, "bench-live", token)
                waits.append((time.perf_counter() - start) * 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the floor: the same appends ingested in-process, no watcher
    floor: list[float] = []
    direct = base / "direct.jsonl"
    direct.write_bytes(_header("bench-direct") + _event(0, "tokstart"))
    with Recall.open(base / "direct-data") as recall, direct.open("ab", buffering=0) as agent:
        recall.ingest([direct])
        for seq in range(1, 51):
            token = f"tok{seq}d"
            agent.write(_event(seq, token))
            start = time.perf_counter()
            recall.ingest([direct])
            _wait(recall, "bench-direct", token)
            floor.append((time.perf_counter() - start) * 1000)
    return {"watch_to_searchable_p50_ms": round(statistics.median(waits), 1),
            "watch_to_searchable_p99_ms": round(_percentile(waits, 0.99), 1),
            "watch_to_searchable_max_ms": round(max(waits), 1),
            "ingest_append_p50_ms": round(statistics.median(floor), 1)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def measure_idle(base: Path) -> dict[str, float]:
    root, data = base / "many", base / "many-data"
    for n in range(IDLE_FILES):
        folder = root / f"project-{n % 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"s{n:04d}.jsonl").write_bytes(_header(f"idle-{n}") + _event(0, f"idle{n}"))
    started = time.monotonic()
    proc = _watcher(data, root)
    assert proc.stdout is not None
    try:
        with Recall.open(data) as reader:
            _wait(reader, f"idle-{IDLE_FILES - 1}", f"idle{IDLE_FILES - 1}", limit_s=600)
        catch_up = time.monotonic() - started
        time.sleep(3.0)  # let the catch-up's last batch finish
        before, t0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(IDLE_SECONDS)
        used, wall = _cpu_seconds(proc.pid) - before, time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"watch_idle_cpu_percent": round(100 * used / wall, 3),
            "watch_catch_up_1000_files_s": round(catch_up, 1)}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="recall-bench-watch-") as tmp:
        base = Path(tmp)
        metrics: dict[str, Any] = {}
        metrics.update(measure_latency(base))
        metrics.update(measure_idle(base))
    return metrics


if __name__ == "__main__":  # pragma: no cover
    print(run())
