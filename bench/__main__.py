"""`make bench`: run every benchmark, write bench/results.json (flat) and bench/RESULTS.md."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
#: (module, title, goal notes) in the order they appear in RESULTS.md.
SUITES = [
    ("bench.fold", "Fold (issue: foundation)"),
    ("bench.index", "Index and search (issue: search)"),
    ("bench.reference", "Reference (issue: references)"),
    ("bench.pipeline", "Kafka pipeline (issue: streaming pipeline)"),
    ("bench.importers", "Importers (issue: real logs)"),
    ("bench.agents", "Importers of other agents (issue: other agents)"),
    ("bench.hardening", "Hostile input (issue: hardening)"),
    ("bench.watch", "Live agents: recall watch (issue 15)"),
    ("bench.listing", "Sessions people can pick (issue 14)"),
    ("bench.redaction", "Redaction of secrets (issue 18)"),
    ("bench.ui", "Web pages: recall ui (issue 19)"),
    ("bench.cli", "The CLI as whole processes (issue 37)"),
    ("bench.semantic", "Recall by meaning (issue 42)"),
    ("bench.scale", "From 100k to 10M events (issue 40)"),
    ("bench.chaos", "A Kafka cluster losing brokers, a fleet of hosts (issue 38)"),
]
#: A line under a suite's title in RESULTS.md (which broker a section's figures come from).
NOTES = {
    "bench.pipeline": "Unsuffixed metrics: Apache Kafka (the version of docker/kafka/pom.xml), one "
                      "KRaft node; `_noida`: noida-db (RECALL_BENCH_BROKERS). "
                      "`pipeline_load_average_*`: the machine's 1-minute load average at the "
                      "start and end of the run.",
    "bench.semantic": "Recall and ingest: the real excerpts under tests/data and the labeled "
                      "queries of tests/data/semantic. `*_100k` / `*_1m`: synthetic indexes "
                      "(generated messages, stand-in vectors of the real size; each measured "
                      "query embedded by the real model). `semantic_load_average_*`: the "
                      "machine's 1-minute load average at the start and end of the run (2 shared "
                      "cores: latencies and the model's throughput scale with the load).",
    "bench.chaos": "Apache Kafka (the version of docker/kafka/pom.xml), three KRaft nodes (RF 3, "
                   "min ISR 2, broker.session.timeout.ms 3000, broker.heartbeat.interval.ms 500), "
                   "`pytest -m cluster`; `failover_unavailable_s`: the longest gap between two "
                   "answered queries after kill -9 / SIGSTOP of a partition leader.",
}
#: Suites run only when named (`python -m bench scale`): they take a quarter to most of an hour.
OPT_IN = {"scale", "chaos"}


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()}"


def _figures(module_name: str) -> list[tuple[str, str]]:
    module = sys.modules.get(module_name)
    if module is None and module_name.split(".")[-1] in OPT_IN:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            return []
    return list(getattr(module, "FIGURES", []))


def main(argv: list[str]) -> int:
    only = set(argv)
    results: dict[str, Any] = {}
    path = HERE / "results.json"
    sections: list[tuple[str, dict[str, Any]]] = []
    for module_name, title in SUITES:
        short = module_name.split(".")[-1]
        if (only and short not in only) or (not only and short in OPT_IN):
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        print(f"== {title}", flush=True)
        metrics = module.run()
        for key, value in metrics.items():
            print(f"  {key}: {value}", flush=True)
        results.update(metrics)
        sections.append((title, metrics))
    if path.exists() and only:
        # read now, not when the run began: a partial run takes minutes and others' runs may
        # have written their metrics meanwhile; this run's replace only its own
        results = {**orjson.loads(path.read_bytes()), **results}
    results["machine"] = machine()
    results["date"] = datetime.date.today().isoformat()
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    # Which suite wrote which metric, so a partial run still renders every section.
    index_path = HERE / "sections.json"
    owners: dict[str, list[str]] = (orjson.loads(index_path.read_bytes())
                                    if index_path.exists() else {})
    for title, metrics in sections:
        # (a partial run of a section, e.g. RECALL_BENCH_SEARCH_ONLY, keeps its other metrics)
        owners[title] = list(dict.fromkeys([*owners.get(title, []), *metrics]))
    index_path.write_bytes(orjson.dumps(owners, option=orjson.OPT_INDENT_2))
    sections = [(title, {k: results[k] for k in owners[title] if k in results})
                for _, title in SUITES if title in owners]
    lines = ["# Benchmark results", "", f"Machine: {results['machine']}  ", f"Date: {results['date']}",
             "", "Regenerate with `make bench` (deterministic corpora; timings vary ±30 % on this",
             "shared 2-core machine, so read the ratios against the baselines of the same run).", ""]
    for title, metrics in sections:
        module_name = next(m for m, t in SUITES if t == title)
        lines += [f"## {title}", ""]
        if module_name in NOTES:
            lines += [NOTES[module_name], ""]
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| `{k}` | {v} |" for k, v in metrics.items()]
        lines.append("")
        # a suite's plots (bench/<png>, drawn by the suite) follow its table
        for alt, png in _figures(module_name):
            if (HERE / png).exists():
                lines += [f"![{alt}]({png})", ""]
    (HERE / "RESULTS.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
