"""Shared helpers of the index and reference benchmarks: sizes, the on-disk session corpus, the
extracted documents, the query mix, timing statistics and the ripgrep baseline.

The corpus is deterministic (bench/corpus.py TextGen + session_events, fixed seeds) and cached as
native JSONL under $RECALL_BENCH_DIR (default /tmp/recall-bench): generating 1M events costs ~20 s
and the files are byte-identical on every run, so a marker file makes the cache safe to reuse.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import TextGen, session_events
from projections.extraction import extract_text

T0 = 1_700_000_000_000
#: Sessions of this many events; compacting at 120 surface nodes gives ~2 compactions a session.
EVENTS_PER_SESSION = 500
COMPACT_AT = 120
CWDS = 10


def scale() -> float:
    """RECALL_BENCH_SCALE (default 1): 1 → 100k and 1M events; 0.05 → 5k and 50k (development)."""
    value = float(os.environ.get("RECALL_BENCH_SCALE", "1"))
    if not 0 < value <= 10:
        raise SystemExit("RECALL_BENCH_SCALE must be in (0, 10]")
    return value


def bench_dir() -> Path:
    path = Path(os.environ.get("RECALL_BENCH_DIR", "/tmp/recall-bench"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def size_name(events: int) -> str:
    """100000 → '100k', 1000000 → '1m' (metric suffixes follow the real size at any scale)."""
    if events >= 1_000_000 and events % 1_000_000 == 0:
        return f"{events // 1_000_000}m"
    if events >= 1000:
        return f"{round(events / 1000)}k"
    return str(events)


def fresh_dir(name: str) -> Path:
    path = bench_dir() / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def header(session_id: str, index: int) -> dict[str, Any]:
    return {"type": "session", "version": 0, "id": session_id, "createdAt": T0 + index * 1000,
            "cwd": f"/home/dev/project{index % CWDS}"}


def write_session(path: Path, session_id: str, index: int, events: int, gen: TextGen, *,
                  compact_at: int = COMPACT_AT) -> int:
    lines = [orjson.dumps(header(session_id, index))]
    lines.extend(orjson.dumps(e) for e in session_events(
        session_id, events, gen, t0=T0 + index * 10_000_000, compact_at=compact_at))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return len(lines) - 1


@dataclass(frozen=True)
class Corpus:
    """`parts[i]` is a directory of session files; parts[0] alone is the small size, all parts
    together the large one (so the large index is the small one plus an incremental ingest)."""

    root: Path
    parts: list[Path]
    sessions: list[int]  # sessions per part
    seed: int

    def files(self, upto: int | None = None) -> list[Path]:
        out: list[Path] = []
        for part in self.parts[:upto]:
            out.extend(sorted(part.glob("*.jsonl")))
        return out


def ensure_corpus(part_sessions: Sequence[int], seed: int = 11) -> Corpus:
    """Native JSONL session files in parts (cached; regenerated when the marker is missing)."""
    key = "-".join(str(n) for n in part_sessions)
    root = bench_dir() / f"corpus-s{seed}-e{EVENTS_PER_SESSION}-c{COMPACT_AT}-{key}"
    parts = [root / f"part{i}" for i in range(len(part_sessions))]
    marker = root / "complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        gen = TextGen(seed)
        index = 0
        start = time.perf_counter()
        for part, count in zip(parts, part_sessions, strict=True):
            part.mkdir(parents=True)
            for _ in range(count):
                sid = f"bench-{index:06d}"
                write_session(part / f"{sid}.jsonl", sid, index, EVENTS_PER_SESSION, gen)
                index += 1
        marker.write_text("ok\n")
        print(f"  (generated {index} sessions in {time.perf_counter() - start:.1f} s at {root})",
              file=sys.stderr, flush=True)
    return Corpus(root, parts, list(part_sessions), seed)


def scaled_corpus() -> Corpus:
    """The index/search corpus at RECALL_BENCH_SCALE: part0 = 200 sessions, the whole = 2000
    (1 → 100k and 1M events), at least 2 and 4."""
    s = scale()
    small = max(2, round(200 * s))
    large = max(small + 2, round(2000 * s))
    return ensure_corpus([small, large - small])


def iter_events(files: Sequence[Path]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    for path in files:
        lines = path.read_bytes().splitlines()
        yield orjson.loads(lines[0]), [orjson.loads(line) for line in lines[1:] if line]


def documents(files: Sequence[Path]) -> list[str]:
    """The non-empty extracted texts of every event (what the index's FTS tables receive)."""
    docs: list[str] = []
    for _, events in iter_events(files):
        for event in events:
            text = extract_text(event)
            if text:
                docs.append(text)
    return docs


# --- query mix ----------------------------------------------------------------------------------

#: Zipf rank bands (TextGen: the word at index r of the sorted vocabulary has weight 1/(r+1)).
#: With ~25 words a document: rare ≈ 0.03–0.05 % of documents, mid ≈ 0.5–1.5 %, common 10–90 %.
RARE_RANKS = (5000, 8000)
MID_RANKS = (150, 500)
COMMON_RANKS = (0, 20)


def _phrases(docs: Sequence[str], rank: dict[str, int], want: Callable[[int, int], bool],
             count: int, stride: int) -> list[str]:
    """`count` distinct adjacent word pairs taken from the documents (so each occurs at least
    once) whose ranks satisfy `want`, walking the documents with a fixed stride."""
    found: list[str] = []
    seen: set[str] = set()
    for i in range(0, len(docs), stride):
        words = docs[i].split()
        for a, b in itertools.pairwise(words):
            if a == b or a not in rank or b not in rank or not want(rank[a], rank[b]):
                continue
            phrase = f"{a} {b}"
            if phrase not in seen:
                seen.add(phrase)
                found.append(phrase)
                break
        if len(found) == count:
            break
    return found


def query_mix(words: Sequence[str], docs: Sequence[str], per_class: int = 30,
              phrases: int = 10) -> dict[str, list[str]]:
    """Three classes of `per_class` queries: (per_class - phrases) single terms spread evenly over
    the class's rank band, plus `phrases` two-word phrases taken from the corpus."""
    rank = {w: r for r, w in enumerate(words)}
    terms = per_class - phrases

    def spread(lo: int, hi: int) -> list[str]:
        step = (hi - lo) / terms
        return [words[lo + int(i * step)] for i in range(terms)]

    stride = max(1, len(docs) // 5000)
    return {
        # one word rare → the pair is at most as frequent as it
        "rare": spread(*RARE_RANKS) + _phrases(
            docs, rank, lambda a, b: max(a, b) >= 3000, phrases, stride),
        # a top-10 word next to a mid-band word: ~0.05–0.5 % of documents
        "mid": spread(*MID_RANKS) + _phrases(
            docs, rank, lambda a, b: min(a, b) < 10 and 20 <= max(a, b) < 200, phrases, stride),
        # both words in the top 5: 1–25 % of documents
        "common": spread(*COMMON_RANKS) + _phrases(
            docs, rank, lambda a, b: max(a, b) < 5, phrases, stride),
    }


# --- timing -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 100)) - 1))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def rg_binary() -> str:
    here = Path(sys.executable).parent / "rg"
    if here.exists():
        return str(here)
    found = shutil.which("rg")
    if found is None:
        raise SystemExit("ripgrep (`rg`) not found: pip install ripgrep==14.1.0")
    return found


def rg_time(rg: str, query: str, paths: Sequence[Path]) -> tuple[float, int]:
    """Wall time of `rg -c -F -i QUERY PATHS` (which files, i.e. sessions, mention it), and the
    number of files it reported."""
    start = time.perf_counter()
    out = subprocess.run([rg, "-c", "-F", "-i", "--", query, *map(str, paths)],
                         capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if out.returncode not in (0, 1):
        raise RuntimeError(f"rg failed: {out.stderr.decode(errors='replace')}")
    return elapsed, len(out.stdout.splitlines())
