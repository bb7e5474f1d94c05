"""Session listing benchmark (issue 14: sessions people can pick). `python -m bench listing`.

Corpus: 600 Claude Code sessions (`claude-code:<id>`) and 600 native ones of 30 events each
(bench/corpus.py `session_events`, TextGen seed 31; the Claude ones' message ids made unique per
session), plus 200 Claude Code sessions holding 20 `claude-code/summary` events each whose
leaves are assistant messages of the first 600 (4,000 summaries, the cross-file titles the
listing resolves across shards). Ingested with `Recall.ingest` into a fresh embedded data dir
(8 shards).

Metrics:
- `listing_sessions`, `listing_summaries`: corpus size.
- `list_sessions_cold_ms`: median over 5 fresh `Recall.open` of the first `list_sessions()`
  (reads every shard's summaries and looks their 4,000 leaves up in every shard).
- `list_sessions_warm_ms`: median of 10 more calls on one open Recall (summary titles cached
  while no shard's generation moves).
- `list_sessions_summary_cost_ratio`: cold / warm, the same run.
- `resolve_prefix_ms`: median `resolve_session` of an 8-character bare-id prefix.
- `read_event_short_id_ms` / `read_event_full_id_ms`: median `read_event` by prefix and by
  full id (an exact id costs nothing extra; a short one one listing query more).
- `search_sessions_titles_ms`: median `search_sessions` of a common word (hits carry titles).
- `ingest_naming_share`: the share of ingest wall time spent deriving listing facts
  (`indexer.writer.facts_of`: parsing user messages, titles, summaries, Claude record uuids).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import indexer.writer as writer
from bench.corpus import TextGen, session_events
from bench.search_corpus import fresh_dir
from streams.facade import Recall

SESSIONS = 600
EVENTS = 30
HOLDERS = 200
SUMMARIES_EACH = 20
T0 = 1_760_000_000_000


def _write(path: Path, head: dict[str, Any], events: list[dict[str, Any]]) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in [head, *events]) + b"\n")


def _claude_events(session_id: str, gen: TextGen, t0: int) -> tuple[list[dict[str, Any]],
                                                                    list[str]]:
    events = list(session_events(session_id, EVENTS, gen, t0=t0))
    leaves = []
    for event in events:
        data = event["data"]
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            message["id"] = f"{session_id}/{message['id']}"
            if event["type"] == "assistant/message":
                leaves.append(message["id"])
        elif event["type"] == "user/message":
            data["id"] = f"{session_id}/{data['id']}"
    return events, leaves


def corpus(root: Path) -> tuple[list[Path], list[str]]:
    src = root / "src"
    src.mkdir()
    gen = TextGen(31)
    rng = random.Random(31)
    claude_ids, leaves = [], []
    for n in range(SESSIONS):
        sid = f"claude-code:{n:08x}-0000-4000-8000-{n:012x}"
        events, own = _claude_events(sid, gen, T0 + n * 1000)
        _write(src / f"c{n}.jsonl", {"type": "session", "version": 0, "id": sid,
                                     "createdAt": T0 + n * 1000, "cwd": f"/w/p{n % 20}"}, events)
        claude_ids.append(sid)
        leaves.extend(own)
    for n in range(SESSIONS):
        sid = f"native-{n:05d}"
        _write(src / f"n{n}.jsonl", {"type": "session", "version": 0, "id": sid,
                                     "createdAt": T0 + n * 1000, "cwd": f"/w/p{n % 20}"},
               list(session_events(sid, EVENTS, gen, t0=T0 + n * 1000)))
    for n in range(HOLDERS):
        sid = f"claude-code:holder-{n:05d}"
        t = T0 + 10_000_000 + n
        events = [{"type": "claude-code/summary", "seq": k, "time": t, "ignorable": True,
                   "data": {"summary": gen.text(6), "leafUuid": rng.choice(leaves)}}
                  for k in range(SUMMARIES_EACH)]
        _write(src / f"h{n}.jsonl", {"type": "session", "version": 0, "id": sid,
                                     "createdAt": t}, events)
    return sorted(src.glob("*.jsonl")), claude_ids


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


def run() -> dict[str, Any]:
    root = fresh_dir("listing")
    files, claude_ids = corpus(root)
    data = root / "data"
    spent = [0.0]
    original = writer.facts_of

    def timed_facts(record: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(record)
        finally:
            spent[0] += time.perf_counter() - start

    writer.facts_of = timed_facts  # type: ignore[assignment]
    try:
        with Recall.open(data, shards=8) as recall:
            start = time.perf_counter()
            recall.ingest(files)
            ingest_s = time.perf_counter() - start
    finally:
        writer.facts_of = original  # type: ignore[assignment]

    cold_times = []
    for _ in range(5):
        with Recall.open(data, shards=8) as fresh:
            start = time.perf_counter()
            listing = fresh.list_sessions()
            cold_times.append(time.perf_counter() - start)
    titled = sum(1 for r in listing if r["titleSource"] == "summary")
    out: dict[str, Any] = {"listing_sessions": len(listing),
                           "listing_summaries": HOLDERS * SUMMARIES_EACH,
                           "listing_summary_titled_sessions": titled,
                           "list_sessions_cold_ms": round(statistics.median(cold_times) * 1000,
                                                          2)}
    with Recall.open(data, shards=8) as recall:
        recall.list_sessions()
        out["list_sessions_warm_ms"] = _median_ms(recall.list_sessions, 10)
        target = claude_ids[123]
        bare = target.partition(":")[2]
        out["resolve_prefix_ms"] = _median_ms(lambda: recall.resolve_session(bare[:8]), 15)
        out["read_event_short_id_ms"] = _median_ms(lambda: recall.read_event(bare[:8], 3), 15)
        out["read_event_full_id_ms"] = _median_ms(lambda: recall.read_event(target, 3), 15)
        word = recall.read_event(target, 1)["event"]["text"].split()[0]
        out["search_sessions_titles_ms"] = _median_ms(
            lambda: recall.search_sessions(word), 10)
    out["list_sessions_summary_cost_ratio"] = round(
        out["list_sessions_cold_ms"] / max(out["list_sessions_warm_ms"], 0.01), 2)
    out["ingest_naming_share"] = round(spent[0] / ingest_s, 3)
    return out
