"""Reference benchmark (issue: references). `python -m bench reference`.

Corpus: three source sessions of 10,000 events each (bench/corpus.py `session_events`, TextGen
seed 23, compaction whenever the surface holds 300 nodes, the generator's default) and a small
target session (20 events), ingested with `Recall.ingest` into a fresh embedded data dir.

Metrics:
- `reference_prepare_ms_3x10k`: median wall time of
  `Recall.prepare_reference(target, message, references=[3 sources], dry_run=True)` over 15 runs
  after one warm-up (goal ≤ 50 ms). A dry run does everything but the append: validate, read the
  target (`read_session`), read each source's current surface (`read_surface`), build the frozen
  snapshots under the 64 KiB per-source budget, and the context message.
- `reference_prepare_p90_ms_3x10k`: the 90th percentile of the same runs.
- `reference_read_surface_ms_10k`, `reference_read_session_ms_target`: medians of the two reads
  it is made of, for one source and for the target (breakdown, not a baseline).
- `reference_prepare_ms_1x10k`: the same dry run with one source, for the per-source cost.
- `reference_context_bytes_3x10k`: size of the context message text the model would receive.
- `reference_prepare_ms_3x10k_uncompacted`: the hard case, sources that never compacted, so each
  current surface holds ~5,700 messages and the snapshot builder must cut to the byte budget.
"""

from __future__ import annotations

import time
from typing import Any

from bench.corpus import TextGen
from bench.search_corpus import fresh_dir, median, ms, percentile, write_session
from streams.facade import Recall

SOURCES = 3
SOURCE_EVENTS = 10_000
RUNS = 15


def timed(fn: Any, runs: int = RUNS) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def run() -> dict[str, Any]:
    out = measure(300, "")
    hard = measure(10**9, "_uncompacted")
    out["reference_prepare_ms_3x10k_uncompacted"] = hard["reference_prepare_ms_3x10k_uncompacted"]
    out["reference_read_surface_ms_10k_uncompacted"] = hard[
        "reference_read_surface_ms_10k_uncompacted"]
    return out


def measure(compact_at: int, suffix: str) -> dict[str, Any]:
    root = fresh_dir("reference")
    src = root / "src"
    src.mkdir()
    gen = TextGen(23)
    sources = [f"ref-source-{i}" for i in range(SOURCES)]
    for i, sid in enumerate(sources):
        write_session(src / f"{sid}.jsonl", sid, i, SOURCE_EVENTS, gen, compact_at=compact_at)
    target = "ref-target"
    write_session(src / f"{target}.jsonl", target, SOURCES, 20, gen)
    refs = [{"sessionId": sid, "label": f"source {i}"} for i, sid in enumerate(sources)]
    message = "What did we decide about the failing job in those sessions?"
    out: dict[str, Any] = {}
    s = suffix
    with Recall.open(root / "data") as recall:
        recall.ingest([src])
        result = recall.prepare_reference(target, message, references=refs, dry_run=True)
        context = result["additionalContext"]
        text = "".join(b.get("text", "") for b in context["content"] if isinstance(b, dict))
        out[f"reference_context_bytes_3x10k{s}"] = len(text.encode("utf-8"))
        prov = context["source"]["references"]
        out[f"reference_retained_messages_per_source{s}"] = int(median(
            [p["retainedMessages"] for p in prov]))
        times = timed(lambda: recall.prepare_reference(target, message, references=refs,
                                                       dry_run=True))
        out[f"reference_prepare_ms_3x10k{s}"] = ms(median(times))
        out[f"reference_prepare_p90_ms_3x10k{s}"] = ms(percentile(times, 90))
        one = timed(lambda: recall.prepare_reference(target, message, references=refs[:1],
                                                     dry_run=True))
        out[f"reference_prepare_ms_1x10k{s}"] = ms(median(one))
        out[f"reference_read_surface_ms_10k{s}"] = ms(median(timed(
            lambda: recall.read_surface(sources[0]))))
        out[f"reference_read_session_ms_target{s}"] = ms(median(timed(
            lambda: recall.read_session(target))))
    fresh_dir("reference").rmdir()
    return out
