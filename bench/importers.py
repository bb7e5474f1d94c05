"""Importer benchmark (issue: real logs). `python -m bench importers`.

Corpus (bench/realcorpus.py): per format, 200 MB × RECALL_BENCH_SCALE (MB = 10^6 bytes) of files
made by replicating the real excerpts of tests/data/realdata/ with fresh session ids, uuids, tool
ids and shifted timestamps (1–6 repetitions of an excerpt per file, so 50–640 KB files). Claude
Code cycles over its three excerpts (sidechains, microcompaction, two compaction styles); Codex
uses the Codex 0.125 excerpt. Cached under $RECALL_BENCH_DIR (default /tmp/recall-bench); the
generation time is not measured.

Metrics, per format (`claude_code`, `codex`); one run each, caches warm (the files were just
written or read, so the page cache holds them):
- `import_mb_per_s_<fmt>` / `import_events_per_s_<fmt>`: the importer alone —
  `import_claude_code(data, name)` / `import_codex(data, name)` over every file's bytes, already
  read into memory before the clock starts. Includes line splitting, JSON parsing, routing
  (sidechains), mapping to native events, header building. Excludes file reads, validation by
  the fold, storage and indexing. Events = native events produced (headers not counted).
- `ingest_mb_per_s_<fmt>` / `ingest_events_per_s_<fmt>`: the full embedded path,
  `Recall.open(fresh dir).ingest([corpus dir])`: directory walk, file reads, format detection,
  the importer, fold validation, native-log store append + fsync, index records and the SQLite
  FTS5 shard writes (8 shards). Same byte count; events = the report's `eventsAdded`.
- `importers_corpus_mb_<fmt>`, `importers_corpus_files_<fmt>`, `importers_corpus_events_<fmt>`:
  the corpus that was measured (so a scaled run says what it measured).
"""

from __future__ import annotations

import gc
import os
import shutil
import time
from typing import Any

from bench.realcorpus import ensure_real_corpus
from bench.search_corpus import bench_dir, scale
from streams.facade import Recall
from streams.ingest.importers import import_claude_code, import_codex

TARGET_MB = 200.0
FORMATS = (("claude-code", "claude_code", import_claude_code),
           ("codex", "codex", import_codex))


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    target = TARGET_MB * scale()
    for fmt, short, importer in FORMATS:
        corpus = ensure_real_corpus(fmt, target)
        mb = corpus.bytes / 1e6
        results[f"importers_corpus_mb_{short}"] = round(mb, 1)
        results[f"importers_corpus_files_{short}"] = len(corpus.files)

        # (a) importer alone: bytes in memory → native events.
        blobs = [(p.name, p.read_bytes()) for p in corpus.files]
        gc.collect()
        events = 0
        rejected = 0
        start = time.perf_counter()
        for name, data in blobs:
            for session in importer(data, name):
                events += len(session.events)
                rejected += len(session.rejections)
        elapsed = time.perf_counter() - start
        del blobs
        gc.collect()
        if rejected:
            raise RuntimeError(f"{fmt} corpus: the importer rejected {rejected} lines")
        results[f"importers_corpus_events_{short}"] = events
        results[f"import_mb_per_s_{short}"] = round(mb / elapsed, 1)
        results[f"import_events_per_s_{short}"] = round(events / elapsed)

        # (b) the embedded ingest path.
        data_dir = bench_dir() / f"importers-ingest-{short}-{os.getpid()}"
        shutil.rmtree(data_dir, ignore_errors=True)
        try:
            with Recall.open(data_dir) as recall:
                start = time.perf_counter()
                report = recall.ingest([corpus.root])
                elapsed = time.perf_counter() - start
            if report.rejected or report.files != len(corpus.files):
                raise RuntimeError(f"{fmt} ingest: {report.to_json()}")
            results[f"ingest_mb_per_s_{short}"] = round(mb / elapsed, 1)
            results[f"ingest_events_per_s_{short}"] = round(report.events_added / elapsed)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return results
