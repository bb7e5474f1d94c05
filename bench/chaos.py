"""A replicated Apache Kafka cluster losing brokers, and a fleet of hosts (issue 38).
`python -m bench chaos` (opt-in: `make bench` does not run it; it takes most of a quarter hour).

Runs the suite's `cluster` tests (`pytest -m cluster`: tests/integration/test_kafka_failover.py
on three KRaft nodes, tests/integration/test_kafka_fleet_hosts.py in network namespaces, as
root) with RECALL_CHAOS_RESULTS pointing at a fresh file; every scenario appends its figures
there as a JSON line, and this turns them into metrics:
- `failover_unavailable_s`: the longest gap between two answered queries over every failover
  scenario (goal <= 10 s); `failover_unavailable_s_<scenario>` per scenario (`ingest`,
  `reindex_replay`, `stall`).
- `fleet_watch_to_searchable_p50_ms` / `_p99_ms`: a line an agent appends on one host, until a
  query from another host finds it (goal p99 <= 1,000 ms).
- `chaos_tests_passed`: whether every cluster test passed (a failed test's figures are still
  recorded when it wrote them, so a window over the tests' bound shows up here).

`RECALL_BENCH_CHAOS_ONLY=<pytest -k expression>` (e.g. `stalled`) runs only the cluster tests it
selects, in minutes: their rows replace their own, the scenarios not run keep theirs from
bench/results.json, `failover_unavailable_s` is the longest of all those rows, and
`chaos_tests_passed` (a whole run's) is left as it was.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent


def metrics_from(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The bench metrics from the JSON lines the cluster tests append."""
    out: dict[str, Any] = {}
    windows: dict[str, float] = {}
    for line in lines:
        if "unavailable_s" in line:
            key = re.sub(r"[^a-z0-9]+", "_", str(line["scenario"]).lower()).strip("_")
            windows[key] = max(windows.get(key, 0.0), float(line["unavailable_s"]))
        for name in ("fleet_watch_to_searchable_p50_ms", "fleet_watch_to_searchable_p99_ms"):
            if name in line:
                out[name] = line[name]
    if windows:
        out["failover_unavailable_s"] = max(windows.values())
        out.update({f"failover_unavailable_s_{k}": v for k, v in sorted(windows.items())})
    return out


ONLY = "RECALL_BENCH_CHAOS_ONLY"
WINDOW = "failover_unavailable_s"


def partial_metrics(measured: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """A partial run's metrics: its scenario rows, and the longest window over those and the
    recorded rows of the scenarios it did not run."""
    out = {k: v for k, v in measured.items() if k != WINDOW}
    rows = {k: v for k, v in recorded.items() if k.startswith(f"{WINDOW}_")}
    rows.update({k: v for k, v in measured.items() if k.startswith(f"{WINDOW}_")})
    if rows:
        out[WINDOW] = max(rows.values())
    return out


def run() -> dict[str, Any]:
    only = os.environ.get(ONLY, "").strip()
    with tempfile.TemporaryDirectory(prefix="recall-chaos-") as tmp:
        results = Path(tmp) / "chaos.jsonl"
        pytest = Path(sys.executable).with_name("pytest")
        done = subprocess.run([str(pytest), "-m", "cluster", "-q", "-p", "no:cacheprovider",
                               *(["-k", only] if only else [])],
                              cwd=REPO, env={**os.environ, "RECALL_CHAOS_RESULTS": str(results)})
        lines = ([orjson.loads(raw) for raw in results.read_bytes().splitlines() if raw.strip()]
                 if results.exists() else [])
    metrics = metrics_from(lines)
    if only:
        recorded = REPO / "bench" / "results.json"
        return partial_metrics(metrics, orjson.loads(recorded.read_bytes())
                               if recorded.exists() else {})
    metrics["chaos_tests_passed"] = done.returncode == 0
    return metrics
