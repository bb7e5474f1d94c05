"""How every cost grows from 100k to 10M events (issue 40). `make bench-scale` or
`python -m bench scale` (opt-in: `make bench` does not run it).

Corpus at each size: the index bench's generator and vocabulary (bench/search_corpus.py
`ensure_corpus`, TextGen seed 11, sessions of 500 events compacting at 120 surface nodes),
200 sessions at 100k, 2,000 at 1M, 20,000 at 10M (the smaller corpora are the first sessions
of the larger ones, byte for byte), plus RECALL_BENCH_GIANTS (default 2) giant sessions of
100,000 events each (TextGen seed 7, compacting at 300 nodes, the generator's default: the
shape long-running agents produce), ingested after the size's corpus and not counted in it.
RECALL_BENCH_SCALE_SIZES (default `100k,1m,10m`) picks the sizes; each size gets a fresh
embedded data dir (default shards) that is removed afterwards unless RECALL_BENCH_KEEP=1.

Metrics, suffixed with the size (`_100k`, `_1m`, `_10m`):
- `scale_ingest_events_per_s_*`: `Recall.ingest(corpus dir)` in a child process (a fresh
  interpreter, so the figure is the ingest's alone), events ÷ the ingest's wall time.
  `scale_ingest_peak_rss_mb_*`: that child's peak resident set (`ru_maxrss` from `wait4`).
  At 10M also written as `embedded_events_per_s_10m` and `ingest_peak_rss_mb_10m` (the
  issue's goal names; `embedded_events_per_s_100k`/`_1m` are `bench index`'s).
  RECALL_BENCH_SCALE_ONLY=ingest measures only these two (as the full run does) and the
  corpus's session count, and skips everything after the ingest.
  RECALL_BENCH_SCALE_ONLY=search with RECALL_BENCH_SCALE_DATA=<data dir> measures only the
  search figures below (the mix, rg, cold) on a data dir a run kept (RECALL_BENCH_KEEP=1, one
  size per run): no ingest, so a change to the read path is measured in minutes.
- `scale_index_bytes_per_text_byte_*`: every shard file after `wal_checkpoint(TRUNCATE)` ÷ the
  UTF-8 bytes of every extracted document text (at 10M also `index_bytes_per_text_byte_10m`);
  `scale_index_mb_*`, `scale_text_mb_*`.
- `scale_search_p50_ms_*`, `scale_search_p99_ms_*`, and per class (rare, mid, common)
  `scale_search_p50_ms_<class>_*`, `scale_search_p99_ms_<class>_*`: `Recall.search_sessions(q)`
  over bench/index.py's 90-query mix (the same queries at every size: the phrases are taken
  from the first 200 sessions, which every size holds), after one warm-up, RECALL_BENCH_REPEAT
  runs (default 1; the medians over runs).
- `scale_search_cold_ms_*`: the first query after `Recall.open` (median of 9 opens).
- `scale_speedup_vs_ripgrep_*`: `rg -c -F -i` over the size's JSONL ÷ search, medians over the
  mix (in-process; the whole-process CLI comparison is `bench cli`'s); also written as
  `speedup_vs_ripgrep_10m` (at 100k and 1M that name is `bench index`'s), and so are
  `search_p50_ms_10m`, `search_p99_ms_10m` and the cold figure as `search_p50_ms_10m_cold`.
- `giant_session_first_page_ms_<view>_*`: one of the 100k-event sessions, as a user first meets
  it: the first request in a fresh process after the ingest (`Recall.open`, and for `web` the
  UI's app, built before the clock starts), one child process per view: `surface`
  (`read_surface`), `show` (`read_event` of a middle event, 5 either side), `events`
  (`search_events` of a common word, first page), `web` (the transcript page
  `GET /session?id=…`, page 1, through the UI's ASGI app in-process), `trace`
  (`trace_session`), `trace_event` (a compacted-away event's trace).
  `giant_session_warm_ms_<view>_*`: the median of 5 more requests in that process.
  `reference_prepare_ms_giant_*`: `prepare_reference` dry run from a small session with the
  giant as its one source, first in a fresh process (`reference_prepare_warm_ms_giant_*`: the
  median of 5 more).
  RECALL_BENCH_SCALE_ONLY=giant measures only these (the corpus and the giants are still
  ingested; the ingest, index-size, search and listing figures are not written).
- Listing, suffixed with the session count (`_200`, `_2k`, `_20k`): `list_sessions_ms_*`
  (the newest 50, as `recall sessions --limit 50`), `list_sessions_title_ms_*` (`--title` of a
  word), `ui_sessions_page_ms_*` (`GET /`), `mcp_candidates_ms_*` (`list_candidates`).

Plots (bench/scale_latency.png, bench/scale_size.png) are drawn from bench/results.json after
the run, so sizes measured in separate runs share one figure.
"""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import TextGen, vocabulary
from bench.index import CLASSES, cold_searches, interleave, measure_rg, measure_search, shard_bytes
from bench.search_corpus import (
    EVENTS_PER_SESSION,
    bench_dir,
    ensure_corpus,
    fresh_dir,
    iter_events,
    median,
    ms,
    percentile,
    query_mix,
    size_name,
    write_session,
)
from bench.search_corpus import documents as extract_documents
from projections.extraction import extract_text
from streams.facade import Recall

HERE = Path(__file__).parent
SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}
GIANT_EVENTS = 100_000
#: Sessions whose first 200 make the query mix (every size holds them).
SAMPLE_SESSIONS = 200
RUNS = 5
#: Sizes whose unprefixed `speedup_vs_ripgrep_<size>` belongs to `bench index` (its own query
#: runs); this suite writes `scale_speedup_vs_ripgrep_<size>` at every size.
INDEX_BENCH_SIZES = frozenset({"100k", "1m"})
FIGURES = [("Latency against corpus size", "scale_latency.png"),
           ("Size, memory and ingest rate against corpus size", "scale_size.png")]


def log(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def sizes() -> list[tuple[str, int]]:
    wanted = os.environ.get("RECALL_BENCH_SCALE_SIZES", "100k,1m,10m")
    out = []
    for name in (w.strip().lower() for w in wanted.split(",") if w.strip()):
        if name in SIZES:
            out.append((name, SIZES[name]))
        elif name.isdigit() and int(name) % EVENTS_PER_SESSION == 0 and int(name) > 0:
            out.append((size_name(int(name)), int(name)))  # small sizes, for the smoke test
        else:
            raise SystemExit(f"RECALL_BENCH_SCALE_SIZES: {name!r} is not one of {list(SIZES)} "
                             f"or a multiple of {EVENTS_PER_SESSION}")
    return out


def giants(count: int, events: int) -> Path:
    """`count` giant sessions of `events` events (cached under the bench dir)."""
    root = bench_dir() / f"scale-giants-{count}x{events}"
    if not (root / "complete").exists():
        fresh_dir(root.name)
        gen = TextGen(7)
        for i in range(count):
            write_session(root / f"giant-{i}.jsonl", f"giant-{i}", 100_000 + i, events, gen,
                          compact_at=300)
        (root / "complete").write_text("ok\n")
    return root


def parts(sessions: int) -> list[int]:
    """Corpus parts nested as the sizes are (so the 1M corpus is the index bench's cached one,
    and each size's files are the first sessions of the next size's)."""
    out: list[int] = []
    for bound in (SAMPLE_SESSIONS, 2000, 20_000):
        if sessions <= sum(out):
            break
        out.append(min(bound, sessions) - sum(out))
    if sessions > sum(out):
        out.append(sessions - sum(out))
    return out


def text_bytes(files: Sequence[Path]) -> int:
    total = 0
    for _, events in iter_events(files):
        for event in events:
            text = extract_text(event)
            if text:
                total += len(text.encode("utf-8"))
    return total


def child_ingest(data: Path, paths: Sequence[Path]) -> tuple[float, float]:
    """(wall seconds of `Recall.ingest(paths)`, peak RSS in MB) in a fresh interpreter. The
    peak is the child's plus its index writer process's (indexer/writerproc.py) when it has
    one: `wait4` alone would give the larger of the two, not what they hold together."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.scale", "--ingest", str(data),
                             *map(str, paths)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    report = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench scale: the ingest child failed ({proc.returncode})")
    found = orjson.loads(report)
    rss_kib = max(usage.ru_maxrss, found["maxrss_kib"] + found["children_maxrss_kib"])
    return float(found["seconds"]), rss_kib / 1024  # KiB on Linux


def timed(fn: Callable[[], Any], runs: int | None = None) -> float:
    """Median seconds of `runs` calls (default RUNS) after a warm-up; a call slower than a
    second is timed once more only (a view that slow is reported as such, not averaged)."""
    start = time.perf_counter()
    fn()  # warm-up
    slow = time.perf_counter() - start > 1.0
    times = []
    for _ in range(1 if slow else runs or RUNS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def search_figures(recall: Recall, paths: Sequence[Path], queries: list[tuple[str, str]],
                   name: str, out: dict[str, Any]) -> None:
    runs = max(1, int(os.environ.get("RECALL_BENCH_REPEAT", "1")))
    found: list[dict[str, float]] = []
    for i in range(runs):
        log(f"search at {name}, run {i + 1} of {runs}")
        search, empty = measure_search(recall, queries)
        rg = measure_rg(paths, queries)
        every = [t for c in CLASSES for t in search[c]]
        run = {f"scale_search_p50_ms_{name}": ms(median(every)),
               f"scale_search_p99_ms_{name}": ms(percentile(every, 99)),
               f"scale_rg_p50_ms_{name}": ms(median([t for c in CLASSES for t in rg[c]])),
               f"scale_search_queries_without_hits_{name}": empty}
        run[f"scale_speedup_vs_ripgrep_{name}"] = round(
            run[f"scale_rg_p50_ms_{name}"] / max(run[f"scale_search_p50_ms_{name}"], 0.01), 1)
        if name not in INDEX_BENCH_SIZES:
            run[f"speedup_vs_ripgrep_{name}"] = run[f"scale_speedup_vs_ripgrep_{name}"]
            run[f"search_p50_ms_{name}"] = run[f"scale_search_p50_ms_{name}"]
            run[f"search_p99_ms_{name}"] = run[f"scale_search_p99_ms_{name}"]
        for cls in CLASSES:
            run[f"scale_search_p50_ms_{cls}_{name}"] = ms(median(search[cls]))
            run[f"scale_search_p99_ms_{cls}_{name}"] = ms(percentile(search[cls], 99))
        found.append(run)
    for key in found[0]:
        out[key] = median([r[key] for r in found])


def listing_figures(recall: Recall, data: Path, sessions: int, target: str,
                    out: dict[str, Any]) -> None:
    from bench.ui import AsgiGet
    from streams.faces.ui.app import create_app

    n = size_name(sessions)
    title_word = (str(recall.list_sessions(limit=1)[0].get("title") or "").split() or ["a"])[0]
    out[f"list_sessions_ms_{n}"] = ms(timed(lambda: recall.list_sessions(limit=50)))
    out[f"list_sessions_title_ms_{n}"] = ms(timed(
        lambda: recall.list_sessions(title=title_word, limit=50)))
    get = AsgiGet(create_app(recall, data_dir=data))
    try:
        out[f"ui_sessions_page_ms_{n}"] = ms(timed(lambda: _ok(get, "/", "")))
    finally:
        get.close()
    out[f"mcp_candidates_ms_{n}"] = ms(timed(lambda: recall.list_candidates(target, "")))


def _ok(get: Any, path: str, query: str) -> bytes:
    status, body = get(path, query)
    if status != 200:
        raise SystemExit(f"bench scale: GET {path}?{query} answered {status}")
    return bytes(body)


GIANT_VIEWS = ("surface", "show", "events", "web", "trace", "trace_event", "reference")


def giant_view(recall: Recall, data: Path, view: str, giant: str, events: int,
               target: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    """(one request of `view` on the giant session, what closes what it opened)."""
    if view == "web":
        from bench.ui import AsgiGet
        from streams.faces.ui.app import create_app

        get = AsgiGet(create_app(recall, data_dir=data))
        return lambda: _ok(get, "/session", f"id={giant}"), get.close
    word = vocabulary(7)[0]  # the most frequent word of the giants' generator
    shadowed = 8  # a user message of the second turn, replaced by the first compaction
    refs = [{"sessionId": giant, "label": "giant"}]
    message = "What did we decide about the failing job in that session?"
    views: dict[str, Callable[[], Any]] = {
        "surface": lambda: recall.read_surface(giant),
        "show": lambda: recall.read_event(giant, events // 2, before=5, after=5),
        "events": lambda: recall.search_events(giant, word),
        "trace": lambda: recall.trace_session(giant),
        "trace_event": lambda: recall.trace_event(giant, shadowed),
        "reference": lambda: recall.prepare_reference(target, message, references=refs,
                                                      dry_run=True),
    }
    return views[view], lambda: None


def giant_figures(data: Path, giant: str, events: int, target: str, name: str,
                  out: dict[str, Any]) -> None:
    for view in GIANT_VIEWS:
        log(f"giant session: {view}, in a fresh process")
        proc = subprocess.run([sys.executable, "-m", "bench.scale", "--giant", str(data), view,
                               giant, str(events), target], stdout=subprocess.PIPE, check=True)
        found = orjson.loads(proc.stdout)
        first, warm = (ms(found["first"]), ms(found["warm"]))
        if view == "reference":
            out[f"reference_prepare_ms_giant_{name}"] = first
            out[f"reference_prepare_warm_ms_giant_{name}"] = warm
        else:
            out[f"giant_session_first_page_ms_{view}_{name}"] = first
            out[f"giant_session_warm_ms_{view}_{name}"] = warm


def _giant_main(argv: Sequence[str]) -> int:
    data, view, giant, events, target = argv
    with Recall.open(data) as recall:
        request, close = giant_view(recall, Path(data), view, giant, int(events), target)
        try:
            gc.collect()
            start = time.perf_counter()
            request()
            first = time.perf_counter() - start
            warm = timed(request) if first < 1.0 else first
        finally:
            close()
    sys.stdout.buffer.write(orjson.dumps({"first": first, "warm": warm}))
    return 0


def ingest_figures(name: str, sessions: int, parts: Sequence[Path], out: dict[str, Any], *,
                   keep: bool = False) -> Path:
    """The child ingest's events/s and peak RSS into a fresh data dir (returned; removed
    unless `keep` or RECALL_BENCH_KEEP=1)."""
    data = fresh_dir(f"scale-data-{name}")
    log(f"{name}: ingest in a child process")
    seconds, rss = child_ingest(data, parts)
    out[f"scale_ingest_events_per_s_{name}"] = round(sessions * EVENTS_PER_SESSION / seconds)
    out[f"scale_ingest_peak_rss_mb_{name}"] = round(rss, 1)
    if name not in INDEX_BENCH_SIZES:
        out[f"embedded_events_per_s_{name}"] = out[f"scale_ingest_events_per_s_{name}"]
        out[f"ingest_peak_rss_mb_{name}"] = out[f"scale_ingest_peak_rss_mb_{name}"]
    if not keep and os.environ.get("RECALL_BENCH_KEEP") != "1":
        fresh_dir(data.name).rmdir()
    return data


def measure_size(name: str, events: int, giant_dir: Path, queries: list[tuple[str, str]],
                 mix: dict[str, list[str]], out: dict[str, Any]) -> None:
    sessions = events // EVENTS_PER_SESSION
    corpus = ensure_corpus(parts(sessions))
    if os.environ.get("RECALL_BENCH_SCALE_ONLY") == "giant":
        data = fresh_dir(f"scale-data-{name}")
        log(f"{name}: ingest in a child process (giant figures only)")
        child_ingest(data, corpus.parts)
        measure_giants(name, data, giant_dir, out)
        return
    files = corpus.files()
    out[f"scale_corpus_sessions_{name}"] = len(files)
    if os.environ.get("RECALL_BENCH_SCALE_ONLY") == "ingest":
        ingest_figures(name, sessions, corpus.parts, out)
        return
    if os.environ.get("RECALL_BENCH_SCALE_ONLY") == "search":
        kept = os.environ.get("RECALL_BENCH_SCALE_DATA", "")
        if not kept or not (Path(kept) / "index").is_dir():
            raise SystemExit("RECALL_BENCH_SCALE_ONLY=search reads RECALL_BENCH_SCALE_DATA: a data"
                             f" dir this suite ingested the {name} corpus into (RECALL_BENCH_KEEP=1)")
        with Recall.open(kept) as recall:
            search_figures(recall, corpus.parts, queries, name, out)
        cold_figure(Path(kept), mix, name, out)
        return
    log(f"{name}: text bytes of {len(files)} sessions")
    text = text_bytes(files)
    out[f"scale_text_mb_{name}"] = round(text / 1e6, 1)
    data = ingest_figures(name, sessions, corpus.parts, out, keep=True)
    target = "bench-000001"
    with Recall.open(data) as recall:
        total, _ = shard_bytes(recall)
        out[f"scale_index_mb_{name}"] = round(total / 1e6, 1)
        out[f"scale_index_bytes_per_text_byte_{name}"] = round(total / text, 2)
        if name not in INDEX_BENCH_SIZES:  # the goal name (bench index has 100k/1m)
            out[f"index_bytes_per_text_byte_{name}"] = out[f"scale_index_bytes_per_text_byte_{name}"]
        search_figures(recall, corpus.parts, queries, name, out)
        log(f"{name}: listing at {sessions} sessions")
        listing_figures(recall, data, sessions, target, out)
    cold_figure(data, mix, name, out)
    measure_giants(name, data, giant_dir, out)


def cold_figure(data: Path, mix: dict[str, list[str]], name: str, out: dict[str, Any]) -> None:
    log(f"{name}: cold search")
    out[f"scale_search_cold_ms_{name}"] = ms(median(cold_searches(data, mix)))
    if name not in INDEX_BENCH_SIZES:
        out[f"search_p50_ms_{name}_cold"] = out[f"scale_search_cold_ms_{name}"]


def measure_giants(name: str, data: Path, giant_dir: Path, out: dict[str, Any]) -> None:
    """Ingest the giant sessions into the size's data dir, then their figures."""
    log(f"{name}: ingest the giant sessions")
    giant_files = sorted(giant_dir.glob("*.jsonl"))
    with Recall.open(data) as recall:
        recall.ingest([giant_dir])
    giant_events = sum(1 for _ in giant_files[0].open("rb")) - 1
    giant_figures(data, "giant-0", giant_events, "bench-000001", name, out)
    if os.environ.get("RECALL_BENCH_KEEP") != "1":
        fresh_dir(data.name).rmdir()


def plot(results: dict[str, Any], out_dir: Path = HERE) -> None:
    """Latency and size against corpus size from every `_<size>` figure in results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in SIZES if f"scale_search_p50_ms_{n}" in results]
    if not names:
        return
    xs = [SIZES[n] for n in names]

    def series(key: str) -> tuple[list[int], list[float]]:
        pts = [(SIZES[n], float(results[key.format(n=n)])) for n in names
               if key.format(n=n) in results]
        return [p[0] for p in pts], [p[1] for p in pts]

    counts = {"100k": "200", "1m": "2k", "10m": "20k"}
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    lines = [("search p50", "scale_search_p50_ms_{n}"), ("search p99", "scale_search_p99_ms_{n}"),
             ("search cold", "scale_search_cold_ms_{n}"),
             *((f"search p50 {c}", f"scale_search_p50_ms_{c}_{{n}}") for c in CLASSES),
             ("rg p50 (baseline)", "scale_rg_p50_ms_{n}"),
             ("giant: events", "giant_session_first_page_ms_events_{n}"),
             ("giant: trace of an event", "giant_session_first_page_ms_trace_event_{n}"),
             ("giant: web page", "giant_session_first_page_ms_web_{n}"),
             ("giant: surface", "giant_session_first_page_ms_surface_{n}"),
             ("giant: reference", "reference_prepare_ms_giant_{n}")]
    for label, key in lines:
        x, y = series(key)
        if y:
            ax.plot(x, y, marker="o", label=label)
    x = [SIZES[n] for n in names if f"list_sessions_ms_{counts.get(n, '')}" in results]
    y = [results[f"list_sessions_ms_{counts[n]}"] for n in names
         if f"list_sessions_ms_{counts.get(n, '')}" in results]
    if y:
        ax.plot(x, y, marker="s", linestyle="--", label="list sessions (newest 50)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, names)
    ax.set_xlabel("corpus size (events)")
    ax.set_ylabel("ms (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(out_dir / "scale_latency.png", dpi=90)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, key in (("index MB", "scale_index_mb_{n}"), ("text MB", "scale_text_mb_{n}"),
                       ("ingest peak RSS MB", "scale_ingest_peak_rss_mb_{n}")):
        x, y = series(key)
        if y:
            left.plot(x, y, marker="o", label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xticks(xs, names)
    left.set_xlabel("corpus size (events)")
    left.set_ylabel("MB (log)")
    left.legend(fontsize=7)
    left.grid(True, which="both", alpha=0.3)
    for label, key, axis in (("ingest events/s", "scale_ingest_events_per_s_{n}", right),):
        x, y = series(key)
        if y:
            axis.plot(x, y, marker="o", label=label)
    twin = right.twinx()
    x, y = series("scale_index_bytes_per_text_byte_{n}")
    if y:
        twin.plot(x, y, marker="s", color="tab:red", label="index bytes / text byte")
    right.set_xscale("log")
    right.set_xticks(xs, names)
    right.set_xlabel("corpus size (events)")
    right.set_ylabel("ingest events/s")
    right.set_ylim(bottom=0)
    twin.set_ylabel("index bytes per text byte")
    twin.set_ylim(bottom=0)
    right.legend(loc="lower left", fontsize=7)
    twin.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "scale_size.png", dpi=90)
    plt.close(fig)


def run() -> dict[str, Any]:
    wanted = sizes()
    giant_count = max(1, int(os.environ.get("RECALL_BENCH_GIANTS", "2")))
    giant_events = int(os.environ.get("RECALL_BENCH_GIANT_EVENTS", str(GIANT_EVENTS)))
    log(f"giant sessions: {giant_count} x {giant_events} events")
    giant_dir = giants(giant_count, giant_events)
    sample = ensure_corpus(parts(min(e for _, e in wanted) // EVENTS_PER_SESSION))
    mix = query_mix(vocabulary(sample.seed), extract_documents(sample.files(1)))
    queries = interleave(mix)
    # (the smoke test takes a few: the interleaved mix keeps every class among the first three)
    queries = queries[:int(os.environ.get("RECALL_BENCH_SCALE_QUERIES", len(queries)))]
    out: dict[str, Any] = {}
    for name, events in wanted:
        measure_size(name, events, giant_dir, queries, mix, out)
    path = HERE / "results.json"
    merged = {**(orjson.loads(path.read_bytes()) if path.exists() else {}), **out}
    if os.environ.get("RECALL_BENCH_SCALE_PLOT", "1") == "1":
        plot(merged)
    return out


def _ingest_main(argv: Sequence[str]) -> int:
    data, *paths = argv
    with Recall.open(data) as recall:
        gc.collect()
        start = time.perf_counter()
        recall.ingest([Path(p) for p in paths])
        seconds = time.perf_counter() - start
    sys.stdout.buffer.write(orjson.dumps({
        "seconds": seconds, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        # the index writer process, ended with the ingest (0 if there was none)
        "children_maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ingest"]:
        sys.exit(_ingest_main(sys.argv[2:]))
    if sys.argv[1:2] == ["--giant"]:
        sys.exit(_giant_main(sys.argv[2:]))
    raise SystemExit("usage: python -m bench scale")
