"""The CLI as a person or a script meets it (issue: a CLI that starts fast). `python -m bench cli`.

Every figure is a whole process, timed from outside from start to exit (hyperfine when it is
installed, else a loop of subprocess runs; output discarded), on the index/search bench's large
data dir (bench/index.py: the 1M-event corpus at RECALL_BENCH_SCALE=1, built as
`RECALL_BENCH_SEARCH_ONLY=1 python -m bench index` builds it, and kept):

- `cli_search_wall_p50_ms_<size>`: `recall --data-dir D search QUERY` (human output, piped),
  the median of RUNS runs per query, then the median over the queries (two single terms from
  each rank band of bench/index.py: rare, mid, common). Goal <= 60 ms at 1M.
- `cli_sessions_wall_p50_ms_<size>`: `recall --data-dir D sessions` (every session, newest
  first), the median of RUNS runs. Goal <= 60 ms at 1M.
- `cli_rg_wall_p50_ms_<size>`: baseline. `rg -c -F -i -g '*.jsonl' QUERY <corpus folders>`
  (which files, i.e. sessions, mention it; ripgrep 14.1) over the same queries, measured the
  same way.
- `cli_speedup_vs_ripgrep_<size>` = that rg median ÷ the `recall search` median. Goal >= 1.0.
- `cli_import_ms`: the sum of every module's own import time (`python -X importtime`) in a
  `recall search` process (`python -m streams`, the same entry point as `recall`): what the
  command loads before and while it answers; the median of 5 processes.

The processes run as an installed CLI runs: with bytecode caches (PYTHONDONTWRITEBYTECODE is
removed from their environment; the warm-up run writes the caches a wheel install writes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.corpus import vocabulary
from bench.search_corpus import bench_dir, fresh_dir, median, rg_binary, scaled_corpus, size_name
from projections.codec import loads
from streams.facade import Recall

#: Runs of each command (the issue asks for the median of at least 10).
RUNS = max(10, int(os.environ.get("RECALL_BENCH_CLI_RUNS", "10")))
#: Zipf rank bands of the corpus vocabulary (bench/index.py's classes).
BANDS = {"rare": (5000, 8000), "mid": (150, 500), "common": (0, 20)}


def log(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def recall_binary() -> str:
    here = Path(sys.executable).parent / "recall"
    if here.exists():
        return str(here)
    found = shutil.which("recall")
    if found is None:
        raise SystemExit("the `recall` command is not installed (pip install -e .)")
    return found


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall_ms(argv: Sequence[str], runs: int = RUNS) -> float:
    """Median wall time in ms of `argv` as a whole process (start to exit, output discarded)
    over `runs` runs, after one warm-up run. A non-zero exit (rg finding nothing) counts."""
    hyperfine = shutil.which("hyperfine")
    if hyperfine is not None:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            subprocess.run([hyperfine, "--shell=none", "--ignore-failure", "--style=none",
                            "--warmup", "1", "--runs", str(runs), "--export-json", str(report),
                            subprocess.list2cmdline(argv)], check=True, capture_output=True,
                           env=environment())
            return float(loads(report.read_bytes())["results"][0]["median"]) * 1000
    times = []
    for n in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=environment())
        if n:  # the first run warms the OS cache
            times.append(time.perf_counter() - start)
    return median(times) * 1000


_SELF_US = re.compile(r"^import time:\s+(\d+) \|", re.MULTILINE)


def import_ms(argv: Sequence[str], runs: int = 5) -> float:
    """The sum of each module's own import time (`-X importtime`) in a run of `argv` (a Python
    module run with -m), in ms: the median of `runs` runs (one run on a busy machine is noise)."""
    subprocess.run([sys.executable, *argv], capture_output=True, check=False,
                   env=environment())  # the bytecode caches, as the timed runs have them
    totals = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                             text=True, check=False, env=environment())
        totals.append(sum(int(us) for us in _SELF_US.findall(out.stderr)) / 1000)
    return median(totals)


def data_dir(corpus: Any, size: str) -> Path:
    """The large data dir bench/index.py's search-only mode keeps (built here if missing)."""
    data = bench_dir() / f"index-data-search-{size}"
    if not (data / "complete").exists():
        fresh_dir(data.name)
        log(f"build the {size} data dir (kept at {data})")
        with Recall.open(data) as recall:
            recall.ingest(corpus.parts[:1])
            recall.ingest(corpus.parts[1:])
        (data / "complete").write_text("ok\n")
    return data


def queries(seed: int) -> list[str]:
    """Two single terms from each rank band, spread over it."""
    words = vocabulary(seed)
    picked = []
    for lo, hi in BANDS.values():
        picked += [words[lo + (hi - lo) // 4], words[lo + 3 * (hi - lo) // 4]]
    return picked


def run() -> dict[str, Any]:
    corpus = scaled_corpus()
    files = corpus.files()
    size = size_name(len(files) * 500)
    data = data_dir(corpus, size)
    recall, rg = recall_binary(), rg_binary()
    base = [recall, "--data-dir", str(data)]
    terms = queries(corpus.seed)
    log(f"recall search and rg over {len(terms)} queries, {RUNS} runs each ({size})")
    search = [wall_ms([*base, "search", q]) for q in terms]
    # the corpus folders (the same JSONL files; a list of them all is too long for one argument)
    grep = [wall_ms([rg, "-c", "-F", "-i", "-g", "*.jsonl", "--", q, *map(str, corpus.parts)])
            for q in terms]
    log("recall sessions")
    sessions = wall_ms([*base, "sessions"])
    imports = import_ms(["-m", "streams", "--data-dir", str(data), "search", terms[0]])
    return {
        f"cli_search_wall_p50_ms_{size}": round(median(search), 1),
        f"cli_sessions_wall_p50_ms_{size}": round(sessions, 1),
        f"cli_rg_wall_p50_ms_{size}": round(median(grep), 1),
        f"cli_speedup_vs_ripgrep_{size}": round(median(grep) / median(search), 2),
        "cli_import_ms": round(imports, 1),
    }
