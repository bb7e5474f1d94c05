"""Index and search benchmark (issue: search). `python -m bench index`; sizes scale with
RECALL_BENCH_SCALE (1 → 100k and 1M events; metric suffixes follow the real sizes).

Corpus: 2000 sessions × 500 events (bench/corpus.py `session_events`, TextGen seed 11, Zipf over
8000 words, a compaction whenever the surface holds 120 nodes), written as native JSONL files in
two parts: part0 = the first 200 sessions (100k events), part1 = the other 1800.
"Documents" are the events whose extracted text (projections.extraction.extract_text) is non-empty
— exactly the rows the index puts into its FTS table; ~72 % of the events.

Metrics (one run; the baselines are measured in the same run on the same machine):
- `raw_fts5_docs_per_s_*`: baseline. The extracted document texts alone, inserted into ONE FTS5
  table defined exactly like the index's (indexer/schema.py `events_fts`: contentless,
  columnsize=0, the same tokenizer), with the rowids the index gives them (document ids: a dense
  number << 6 | length key), 1000 rows per `BEGIN…COMMIT` through `executemany`, WAL +
  synchronous=NORMAL (docs/ENGINE-NOTES.md 3c), through the index's own SQLite binding (APSW, so the same
  SQLite build on both sides). Excludes JSON parsing, extraction, and everything else. (Until
  issue 16 item 3 the baseline was a plain `fts5(body)` table, which also stores the text and
  its size and tokenizes with unicode61's default: 1.2–1.45x slower than the index's table on
  this corpus. `raw_fts5_plain_docs_per_s_<small>` and
  `index_rate_ratio_vs_raw_fts5_plain_<small>` keep that older figure for comparison.)
- `embedded_docs_per_s_*`: the real path, `Recall.ingest(dir)`: read + parse + validate the JSONL
  (LogBuilder), store append + fsync, fold, index records, `ShardSet.write_batch` (events rows,
  FTS rows, sessions, tracking) into the 8 shards, and the merge of each shard's FTS segments
  that ends a bulk write (indexer/segments.py). documents/s = the same document count ÷ that
  wall time (the structural events without text are written too, as the real path does).
  `ingest_us_per_event_*`: the same wall time per event (all events, not only documents).
- `index_rate_ratio_vs_raw_fts5` = embedded_docs_per_s ÷ raw_fts5_docs_per_s over the whole large
  corpus (goal ≥ 0.7); `..._100k` over part0 only; `..._append_path_100k` uses
  `EmbeddedRuntime.append_events(header, events)` (one call per 500-event session, events parsed
  before the clock starts: no file read, JSON parse or LogBuilder validation) instead of ingest.
- The ceiling of that ratio with today's work per event, measured at the small size
  (`split_costs`): `ingest_cpu_us_per_event_<small>` is the real ingest's CPU (both threads);
  `ingest_reader_alone_us_per_event_<small>` the same ingest with the index batches kept
  instead of written (read, parse, validate, store append + fsync, fold, index records: the
  Python half, which holds the GIL; CPU); `index_writer_alone_us_per_event_<small>` those batches
  written on one thread (CPU; `ShardSet.write_batch`, grouped as the writer thread groups them, and
  the closing segment merge). `index_rate_ratio_reader_alone_<small>` /
  `_writer_alone_<small>` = documents ÷ that half's wall time ÷ raw FTS5 docs/s: the ratio if the
  other half cost nothing; `index_rate_ratio_ceiling_2cores_<small>` = documents ÷ ((reader +
  writer CPU) ÷ 2) ÷ raw FTS5 docs/s: the best any schedule of today's work on two cores could
  reach. A goal above the reader-alone ratio cannot be met by any writer, and above the
  two-core ceiling by no overlap of the two.
- `search_p50_ms_*` / `search_p99_ms_*`: `Recall.search_sessions(q)` end to end (default limit
  20, strict consistency), each query once, classes interleaved, after one warm-up query.
  `search_p50_ms_1m_cold`: the first query after opening the data dir (`Recall.open`, shard
  files in the OS cache), median over 9 opens (3 queries of each class). The mix
  is 90 queries: per class 20 single terms spread over a Zipf rank band plus 10 two-word phrases
  taken from the corpus — rare (ranks 5000–8000, ~0.03 % of documents), mid (ranks 150–500,
  ~0.5–1.5 %), common (top 20 words, 10–90 % of documents, and pairs of top-5 words). The
  per-class medians are `search_p50_ms_<class>_*`; `query_docs_median_<class>_*` is the median
  number of documents matching a query of the class (counted on the raw FTS5 table).
- At the large size the mix runs RECALL_BENCH_REPEAT times (default 3), each run search then
  rg, each measured as above; the metrics are the medians over the runs and `*_min`/`*_max` of
  `search_p50_ms_1m`, `search_p99_ms_1m`, `rg_p50_ms_1m`, `speedup_vs_ripgrep_1m` their spread
  (`search_runs_1m` runs). `RECALL_BENCH_SEARCH_ONLY=1 python -m bench index` measures only
  these (and the cold figure) on a data dir built the same way and kept between runs.
- `search_cpu_p50_ms_*` / `rg_cpu_p50_ms_*`: median CPU time (user + system) per query of the
  same runs — search's process time, rg's child-process rusage (both of rg's threads). The
  machine's other load slows the wall figures by up to 3x (rg 72–255 ms on the same files in
  one afternoon) but moves CPU time much less, so these two say how the work compares.
- `rg_p50_ms_*`: baseline. `rg -c -F -i QUERY <corpus JSONL>` (ripgrep 14.1, default threads),
  which answers "which sessions mention it" from the same files. `speedup_vs_ripgrep_*` =
  median rg time ÷ median search time over the same 90 queries (goal ≥ 15× at 1M, issue 16;
  p50 ≤ 10 ms and p99 ≤ 100 ms). rg runs 2 threads here, so a loaded machine slows it too.
- `index_bytes_per_text_byte`: all shard files (after `PRAGMA wal_checkpoint(TRUNCATE)`) ÷ UTF-8
  bytes of all extracted document text (goal ≤ 1.5). `index_bytes_per_text_byte_<part>` splits
  it with dbstat (schema v2, indexer/schema.py): `events_table` (one small row per event),
  `blocks` (the raw events, zstd in blocks of 16, and their dictionaries), `events_indexes`
  (extents and the current-surface index), `fts` (events_fts, contentless), `trigram`, `other`.
  `raw_fts5_bytes_per_text_byte` is the baseline's file (the contentless token index alone).
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import apsw

from bench.corpus import vocabulary
from bench.search_corpus import (
    bench_dir,
    fresh_dir,
    iter_events,
    median,
    ms,
    percentile,
    query_mix,
    rg_binary,
    rg_time,
    scaled_corpus,
    size_name,
)
from bench.search_corpus import documents as extract_documents
from indexer.normalize import fts_phrase
from indexer.pipeline import GROUP_RECORDS, Batch, bulk_mode, merge
from indexer.schema import DDL, document_id
from projections.records import IndexRecord
from streams.facade import Recall

BATCH = 1000
CLASSES = ("rare", "mid", "common")


def log(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


# --- baseline: raw FTS5 ---------------------------------------------------------------------------


#: The index's own FTS table definition (indexer/schema.py), under the baseline's name.
INDEX_FTS_DDL = next(d for d in DDL if "VIRTUAL TABLE events_fts " in d).replace(
    "events_fts", "docs")
PLAIN_FTS_DDL = "CREATE VIRTUAL TABLE docs USING fts5(body)"


def raw_fts5(path: Path, docs: Sequence[str], split: int, *, ddl: str = INDEX_FTS_DDL
             ) -> tuple[float, float, apsw.Connection]:
    """Insert docs into one FTS5 table (the index's definition by default), 1000 rows/txn,
    rowids as the index makes them; seconds for docs[:split] and for docs[split:]."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(ddl)
    times = []
    for lo, hi in ((0, split), (split, len(docs))):
        start = time.perf_counter()
        for i in range(lo, hi, BATCH):
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO docs(rowid, text) VALUES (?, ?)" if ddl != PLAIN_FTS_DDL
                             else "INSERT INTO docs(rowid, body) VALUES (?, ?)",
                             ((document_id(n + 1, len(d)), d)
                              for n, d in enumerate(docs[i:min(i + BATCH, hi)], start=i)))
            conn.execute("COMMIT")
        times.append(time.perf_counter() - start)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return times[0], times[1], conn


# --- the embedded index ---------------------------------------------------------------------------


def shard_bytes(recall: Recall) -> tuple[int, dict[str, int]]:
    """Checkpoint every shard; total bytes of the shard files and a dbstat split by table kind."""
    shards = recall.backend.runtime.shards
    total = 0
    parts: dict[str, int] = {}
    for shard in shards:
        with shards.writing():
            shard.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(shard.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        with shard.reader() as conn:
            rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
        for name, size in rows:
            if name == "events":
                kind = "events_table"
            elif name in ("blocks", "dictionaries"):
                kind = "blocks"
            elif name in ("extents", "extents_seq", "events_current"):
                kind = "events_indexes"
            elif name.startswith("events_fts"):
                kind = "fts"
            elif name.startswith("events_tri"):
                kind = "trigram"
            else:
                kind = "other"
            parts[kind] = parts.get(kind, 0) + int(size)
    return total, parts


def append_path(files: Sequence[Path]) -> float:
    """Seconds to push the sessions through EmbeddedRuntime.append_events (one call a session)."""
    parsed = list(iter_events(files))
    data = fresh_dir("index-append")
    with Recall.open(data) as recall:
        runtime = recall.backend.runtime
        start = time.perf_counter()
        for header, events in parsed:
            runtime.append_events(header, events)
        return time.perf_counter() - start


class _Sink:
    """Stands in for the shard set during `split_costs`' reader-alone ingest: keeps each batch
    the ingest would write (after making its source durable, as the writer thread does)."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def submit(self, records: Sequence[IndexRecord], positions: Mapping[str, int], *,
               before: Callable[[], Any] | None = None) -> None:
        if before is not None:
            before()
        self.batches.append((records, positions))


def split_costs(paths: Sequence[Path]) -> tuple[float, float, float, float]:
    """Issue 16's ceiling: the two halves of `Recall.ingest(paths)` measured apart, on one
    thread each. (reader wall-s, reader CPU-s, writer wall-s, writer CPU-s): the reader (read, validate,
    store append + fsync, fold, index records) with its batches kept instead of written; then
    those batches written by `ShardSet.write_batch`, grouped as the writer thread groups them
    when it is behind (GROUP_RECORDS), and the closing merge of FTS segments."""
    sink = _Sink()
    with Recall.open(fresh_dir("index-reader")) as recall:
        runtime = recall.backend.runtime
        # the ingest's index writes go to the sink (EmbeddedRuntime._index_append's `shards`)
        runtime.ingestor.on_append = partial(runtime._index_append, shards=sink)
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        recall.ingest(paths)
        reader_cpu, reader_wall = time.process_time() - cpu, time.perf_counter() - wall
    groups: list[list[Batch]] = [[]]
    size = 0
    for batch in sink.batches:
        if size >= GROUP_RECORDS:
            groups.append([])
            size = 0
        groups[-1].append(batch)
        size += len(batch[0])
    with Recall.open(fresh_dir("index-writer")) as recall:
        shards = recall.backend.runtime.shards
        before = shards.structures()
        gc.collect()
        with bulk_mode():
            wall, cpu = time.perf_counter(), time.process_time()
            for group in groups:
                shards.write_batch(*merge(group))
            shards.merge_grown(before)
            writer_cpu, writer_wall = time.process_time() - cpu, time.perf_counter() - wall
    return reader_wall, reader_cpu, writer_wall, writer_cpu


# --- queries --------------------------------------------------------------------------------------


def interleave(mix: dict[str, list[str]]) -> list[tuple[str, str]]:
    out = []
    for i in range(max(len(v) for v in mix.values())):
        for cls in CLASSES:
            if i < len(mix[cls]):
                out.append((cls, mix[cls][i]))
    return out


def measure_search(recall: Recall, queries: list[tuple[str, str]]
                   ) -> tuple[dict[str, list[float]], int]:
    """Seconds per query by class, and how many queries found no session (rare queries are
    picked on the large corpus, so a few may be absent from the small part)."""
    recall.search_sessions(queries[0][1])  # warm-up (statement cache, page cache)
    times: dict[str, list[float]] = {c: [] for c in CLASSES}
    cpu: list[float] = []
    empty = 0
    for cls, q in queries:
        cpu_start = time.process_time()
        start = time.perf_counter()
        page = recall.search_sessions(q)
        times[cls].append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        empty += not page["items"]
    times["cpu"] = cpu
    return times, empty


def measure_rg(paths: Sequence[Path], queries: list[tuple[str, str]]) -> dict[str, list[float]]:
    rg = rg_binary()
    rg_time(rg, queries[0][1], paths)  # warm-up
    times: dict[str, list[float]] = {c: [] for c in CLASSES}
    cpu: list[float] = []
    for cls, q in queries:
        before = _children_cpu()
        elapsed, _ = rg_time(rg, q, paths)
        cpu.append(_children_cpu() - before)
        times[cls].append(elapsed)
    times["cpu"] = cpu
    return times


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search_metrics(name: str, search: dict[str, list[float]], rg: dict[str, list[float]],
                   out: dict[str, Any]) -> None:
    every = [t for c in CLASSES for t in search[c]]
    every_rg = [t for c in CLASSES for t in rg[c]]
    out[f"search_p50_ms_{name}"] = ms(median(every))
    out[f"search_p99_ms_{name}"] = ms(percentile(every, 99))
    out[f"rg_p50_ms_{name}"] = ms(median(every_rg))
    out[f"speedup_vs_ripgrep_{name}"] = round(median(every_rg) / median(every), 1)
    if "cpu" in search and "cpu" in rg:
        # CPU time (user + system) per query: what the machine's load does not change much.
        out[f"search_cpu_p50_ms_{name}"] = ms(median(search["cpu"]))
        out[f"rg_cpu_p50_ms_{name}"] = ms(median(rg["cpu"]))
    for cls in CLASSES:
        out[f"search_p50_ms_{cls}_{name}"] = ms(median(search[cls]))
        out[f"search_max_ms_{cls}_{name}"] = ms(max(search[cls]))
        out[f"speedup_vs_ripgrep_{cls}_{name}"] = round(median(rg[cls]) / median(search[cls]), 1)


def search_runs(recall: Recall, paths: Sequence[Path], queries: list[tuple[str, str]],
                name: str, out: dict[str, Any], repeats: int) -> None:
    """`repeats` runs of (the whole query mix through search, then through rg), each measured
    exactly as one run always was (`measure_search`, `measure_rg`); every metric is the median
    over the runs, and `_min`/`_max` of the headline figures show their spread (this machine is
    shared: a loaded moment slows rg and search alike, but not always the same run)."""
    runs: list[dict[str, Any]] = []
    for i in range(repeats):
        log(f"search at {name}, run {i + 1} of {repeats}")
        search, empty = measure_search(recall, queries)
        rg = measure_rg(paths, queries)
        run: dict[str, Any] = {}
        search_metrics(name, search, rg, run)
        run[f"search_queries_without_hits_{name}"] = empty
        log("  " + ", ".join(f"{k}={run[k]}" for k in (
            f"search_p50_ms_{name}", f"search_p99_ms_{name}", f"rg_p50_ms_{name}",
            f"speedup_vs_ripgrep_{name}")))
        runs.append(run)
    for key in runs[0]:
        out[key] = median([r[key] for r in runs])
    for key in (f"search_p50_ms_{name}", f"search_p99_ms_{name}", f"rg_p50_ms_{name}",
                f"speedup_vs_ripgrep_{name}"):
        out[f"{key}_min"] = min(r[key] for r in runs)
        out[f"{key}_max"] = max(r[key] for r in runs)
    out[f"search_runs_{name}"] = repeats


def repeats() -> int:
    """RECALL_BENCH_REPEAT (default 3): runs of the large-size query mix."""
    return max(1, int(os.environ.get("RECALL_BENCH_REPEAT", "3")))


def search_only() -> dict[str, Any]:
    """`RECALL_BENCH_SEARCH_ONLY=1 python -m bench index`: only the large-size search metrics
    (runs, rg, cold), on a data dir built exactly as `run` builds it (ingest part0, then the
    rest) and kept under the bench dir between runs (a marker says the build completed), so
    search work can be measured again without minutes of ingest. Ingest and size metrics keep
    their last full-run values."""
    corpus = scaled_corpus()
    all_files = corpus.files()
    ln = size_name(len(all_files) * 500)
    data = bench_dir() / f"index-data-search-{ln}"
    if not (data / "complete").exists():
        fresh_dir(data.name)
        log(f"build the {ln} data dir (kept at {data})")
        with Recall.open(data) as recall:
            recall.ingest(corpus.parts[:1])
            recall.ingest(corpus.parts[1:])
        (data / "complete").write_text("ok\n")
    log("extracting documents (for the query mix)")
    docs = extract_documents(corpus.files(1)) + extract_documents(all_files[len(corpus.files(1)):])
    mix = query_mix(vocabulary(corpus.seed), docs)
    out: dict[str, Any] = {}
    with Recall.open(data) as recall:
        search_runs(recall, corpus.parts, interleave(mix), ln, out, repeats())
    log(f"cold search at {ln}")
    out[f"search_p50_ms_{ln}_cold"] = ms(median(cold_searches(data, mix)))
    return out


def cold_searches(data: Path, mix: dict[str, list[str]]) -> list[float]:
    """Seconds of the first query after each of 9 opens of the data dir (3 per class)."""
    times = []
    for cls in CLASSES:
        for q in mix[cls][::10][:3]:
            gc.collect()
            with Recall.open(data) as recall:
                start = time.perf_counter()
                recall.search_sessions(q)
                times.append(time.perf_counter() - start)
    return times


# --- the suite ------------------------------------------------------------------------------------


def run() -> dict[str, Any]:
    if os.environ.get("RECALL_BENCH_SEARCH_ONLY") == "1":
        return search_only()
    corpus = scaled_corpus()
    small_files, all_files = corpus.files(1), corpus.files()
    small_events = sum(1 for _ in small_files) * 500
    large_events = len(all_files) * 500
    sn, ln = size_name(small_events), size_name(large_events)
    out: dict[str, Any] = {f"search_corpus_events_{ln}": large_events,
                           f"search_corpus_sessions_{ln}": len(all_files)}

    log("extracting documents")
    docs_small = extract_documents(small_files)
    docs = docs_small + extract_documents(all_files[len(small_files):])
    text_bytes = sum(len(d.encode("utf-8")) for d in docs)
    out[f"search_corpus_documents_{ln}"] = len(docs)
    out[f"search_corpus_text_mb_{ln}"] = round(text_bytes / 1e6, 1)
    out[f"search_corpus_jsonl_mb_{ln}"] = round(sum(p.stat().st_size for p in all_files) / 1e6, 1)
    mix = query_mix(vocabulary(corpus.seed), docs)
    queries = interleave(mix)

    log(f"raw FTS5 baseline over {len(docs)} documents")
    work = fresh_dir("index-raw")
    gc.collect()
    raw_small, raw_rest, raw = raw_fts5(work / "raw.sqlite", docs, len(docs_small))
    raw_rate_small = len(docs_small) / raw_small
    raw_rate = len(docs) / (raw_small + raw_rest)
    out[f"raw_fts5_docs_per_s_{sn}"] = round(raw_rate_small)
    out[f"raw_fts5_docs_per_s_{ln}"] = round(raw_rate)
    out["raw_fts5_bytes_per_text_byte"] = round(
        (work / "raw.sqlite").stat().st_size / text_bytes, 2)
    for cls in CLASSES:
        counts = [raw.execute("SELECT count(*) FROM docs WHERE docs MATCH ?",
                              (fts_phrase(q),)).fetchone()[0] for q in mix[cls]]
        out[f"query_docs_median_{cls}_{ln}"] = int(median(counts))
    raw.close()
    log(f"plain fts5(body) table over the {len(docs_small)} documents of {sn} (older baseline)")
    gc.collect()
    plain_small, _, plain = raw_fts5(work / "plain.sqlite", docs_small, len(docs_small),
                                     ddl=PLAIN_FTS_DDL)
    plain.close()
    out[f"raw_fts5_plain_docs_per_s_{sn}"] = round(len(docs_small) / plain_small)

    data = fresh_dir("index-data")
    with Recall.open(data) as recall:
        log(f"ingest {sn} ({len(small_files)} session files)")
        gc.collect()
        start, cpu_start = time.perf_counter(), time.process_time()
        recall.ingest(corpus.parts[:1])
        ingest_small = time.perf_counter() - start
        out[f"ingest_cpu_us_per_event_{sn}"] = round(
            (time.process_time() - cpu_start) * 1e6 / small_events, 1)
        rate_small = len(docs_small) / ingest_small
        out[f"embedded_docs_per_s_{sn}"] = round(rate_small)
        out[f"embedded_events_per_s_{sn}"] = round(small_events / ingest_small)
        out[f"index_rate_ratio_vs_raw_fts5_{sn}"] = round(rate_small / raw_rate_small, 3)
        out[f"index_rate_ratio_vs_raw_fts5_plain_{sn}"] = round(
            plain_small / ingest_small, 3)
        out[f"ingest_us_per_event_{sn}"] = round(ingest_small * 1e6 / small_events, 1)

        log(f"search at {sn}")
        search, empty = measure_search(recall, queries)
        rg = measure_rg(corpus.parts[:1], queries)
        search_metrics(sn, search, rg, out)
        out[f"search_queries_without_hits_{sn}"] = empty

        log(f"ingest the other {len(all_files) - len(small_files)} session files")
        gc.collect()
        start = time.perf_counter()
        recall.ingest(corpus.parts[1:])
        ingest_rest = time.perf_counter() - start
        rate = len(docs) / (ingest_small + ingest_rest)
        out[f"embedded_docs_per_s_{ln}"] = round(rate)
        out[f"embedded_events_per_s_{ln}"] = round(large_events / (ingest_small + ingest_rest))
        out["index_rate_ratio_vs_raw_fts5"] = round(rate / raw_rate, 3)
        out[f"ingest_us_per_event_{ln}"] = round((ingest_small + ingest_rest) * 1e6
                                                 / large_events, 1)

        search_runs(recall, corpus.parts, queries, ln, out, repeats())

        total, parts = shard_bytes(recall)
        out["index_bytes_per_text_byte"] = round(total / text_bytes, 2)
        for kind in ("events_table", "blocks", "events_indexes", "fts", "trigram", "other"):
            out[f"index_bytes_per_text_byte_{kind}"] = round(parts.get(kind, 0) / text_bytes, 2)
        out[f"index_mb_{ln}"] = round(total / 1e6, 1)

    log(f"cold search at {ln}")
    out[f"search_p50_ms_{ln}_cold"] = ms(median(cold_searches(data, mix)))

    log(f"reader and writer apart at {sn}")
    reader_wall, reader_cpu, writer_wall, writer_cpu = split_costs(small_files)
    out[f"ingest_reader_alone_us_per_event_{sn}"] = round(reader_cpu * 1e6 / small_events, 1)
    out[f"index_writer_alone_us_per_event_{sn}"] = round(writer_cpu * 1e6 / small_events, 1)
    out[f"index_rate_ratio_reader_alone_{sn}"] = round(
        len(docs_small) / reader_wall / raw_rate_small, 3)
    out[f"index_rate_ratio_writer_alone_{sn}"] = round(
        len(docs_small) / writer_wall / raw_rate_small, 3)
    out[f"index_rate_ratio_ceiling_2cores_{sn}"] = round(
        len(docs_small) / ((reader_cpu + writer_cpu) / 2) / raw_rate_small, 3)

    log(f"append path at {sn}")
    gc.collect()
    append_small = append_path(small_files)
    out[f"index_rate_ratio_vs_raw_fts5_append_path_{sn}"] = round(
        len(docs_small) / append_small / raw_rate_small, 3)
    if os.environ.get("RECALL_BENCH_KEEP") != "1":
        for name in ("index-raw", "index-data", "index-append", "index-reader", "index-writer"):
            fresh_dir(name).rmdir()
    return out
