"""Redaction benchmark (issue 18). `python -m bench redaction`; sizes scale with
RECALL_BENCH_SCALE (1 → 40 sessions × 500 events = 20k events for the ingest comparison).

What redacting secrets before indexing costs, against the same work without it, in the same run
(this 2-core machine is shared: each figure is the best of interleaved repeats):
- `redaction_cost_us_per_event`: `projections.records.event_record` with the default rules
  (streams/core/detectors.py) minus the same without redaction, per event, over the search
  benchmark's synthetic corpus (bench/corpus.py, TextGen seed 11: prose, tool calls, results,
  compactions). `_real_logs`: over the real agent logs of tests/data imported by the registry
  (1,343 events, long tool outputs with URLs and JSON). `_all_secrets`: over the planted-secret
  corpus of the tests (every event carries secrets: the redaction path itself).
- `index_rate_ratio_vs_raw_fts5_redaction_on_<n>` / `_off_<n>`: issue 16's ratio (documents/s of
  `Recall.ingest(dir)` ÷ documents/s of a plain FTS5 insert of the same texts, bench/index.py)
  with RECALL_REDACT on and off (their difference is within this machine's noise);
  `redaction_share_of_ingest_time` = `redaction_cost_us_per_event` ÷ the µs per event of the
  ingest with redaction on (`embedded_events_per_s_redaction_on_<n>`). bench/index.py's own `index_rate_ratio_vs_raw_fts5` runs with
  the default settings, i.e. with redaction on.
- `redaction_false_positives_real_logs` / `_code_corpus`: redactions in tests/data's real logs
  and in the tests' generated code-heavy corpus (git SHAs, UUIDs, lockfile hashes, base64, code
  that names passwords): the goal is 0. `_python_sources` / `redaction_python_sources_mb`: the
  same over every `.py` file of this virtualenv's site-packages (what is installed varies).
"""

from __future__ import annotations

import gc
import shutil
import site
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import TextGen, session_events
from bench.index import raw_fts5
from bench.search_corpus import documents as extract_documents
from bench.search_corpus import ensure_corpus, scale, size_name
from bench.secretcorpus import code_corpus, secret_sessions
from projections.fold import SurfaceState, plan
from projections.records import event_record
from projections.redaction import NO_REDACTION, Redactor
from streams.core.detectors import default_redactor
from streams.core.settings import Settings
from streams.facade import Recall
from streams.ingest.importers import IMPORTERS, detect_format

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 5


def log(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


Steps = list[tuple[str, dict[str, Any], Any]]


def folded(sessions: list[tuple[str, list[dict[str, Any]]]]) -> Steps:
    steps: Steps = []
    for sid, events in sessions:
        state = SurfaceState()
        for event in events:
            step = plan(state, event)
            state = step.state
            steps.append((sid, event, step))
    return steps


def synthetic() -> Steps:
    gen = TextGen(11)
    return folded([(f"s{n}", list(session_events(f"s{n}", 500, gen, compact_at=120)))
                   for n in range(20)])


def real_logs() -> Steps:
    sessions = []
    for path in sorted((ROOT / "tests" / "data").rglob("*")):
        if not path.is_file() or path.name == "README.md":
            continue
        fmt = detect_format(path, path.read_bytes()[:4096])
        if fmt is not None:
            sessions += [(str(s.header["id"]), list(s.events))
                         for s in IMPORTERS[fmt](path.read_bytes(), str(path))]
    return folded(sessions)


def planted() -> Steps:
    return folded([(sid, lines[1:]) for sid, lines in secret_sessions().items()])


def cost_us(steps: Steps, redactor: Redactor) -> float:
    """Best-of-REPEATS µs per event of redaction (on − off, interleaved)."""
    def once(r: Redactor) -> float:
        start = time.perf_counter()
        for sid, event, step in steps:
            event_record(sid, event, step, redactor=r)
        return time.perf_counter() - start

    on, off = [], []
    for _ in range(REPEATS):
        gc.collect()
        off.append(once(NO_REDACTION))
        on.append(once(redactor))
    return round((min(on) - min(off)) / len(steps) * 1e6, 2)


def ingest_seconds(files_dir: Path, redact: bool) -> float:
    data = Path(tempfile.mkdtemp(prefix="recall-bench-redaction-"))
    try:
        with Recall.open(settings=Settings(data_dir=data / "data", redact=redact)) as recall:
            gc.collect()
            start = time.perf_counter()
            recall.ingest([files_dir])
            return time.perf_counter() - start
    finally:
        shutil.rmtree(data, ignore_errors=True)


def false_positives(redactor: Redactor, texts: list[str]) -> int:
    return sum(len(redactor.findings(t)) for t in texts)


def python_sources() -> tuple[list[str], float]:
    texts: list[str] = []
    for root in {Path(p) for p in site.getsitepackages()}:
        for path in root.rglob("*.py"):
            try:
                texts.append(path.read_text())
            except (OSError, UnicodeDecodeError):
                continue
    return texts, sum(map(len, texts)) / 1e6


def run() -> dict[str, Any]:
    redactor = default_redactor()
    out: dict[str, Any] = {}
    corpora: list[tuple[str, Callable[[], Steps]]] = [
        ("", synthetic), ("_real_logs", real_logs), ("_all_secrets", planted)]
    for suffix, make in corpora:
        steps = make()
        log(f"redaction cost{suffix or ' (synthetic)'}: {len(steps)} events")
        out[f"redaction_cost_us_per_event{suffix}"] = cost_us(steps, redactor)

    sessions = max(2, round(40 * scale()))
    corpus = ensure_corpus([sessions], seed=11)
    files = corpus.files()
    docs = extract_documents(files)
    name = size_name(len(files) * 500)
    work = Path(tempfile.mkdtemp(prefix="recall-bench-raw-"))
    try:
        raw_s, _, conn = raw_fts5(work / "raw.sqlite", docs, len(docs))
        conn.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_rate = len(docs) / raw_s
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(3):
        for redact in (False, True):
            log(f"ingest {name} with redaction {'on' if redact else 'off'}")
            times[redact].append(ingest_seconds(corpus.parts[0], redact))
    on, off = min(times[True]), min(times[False])
    out[f"index_rate_ratio_vs_raw_fts5_redaction_on_{name}"] = round(len(docs) / on / raw_rate, 3)
    out[f"index_rate_ratio_vs_raw_fts5_redaction_off_{name}"] = round(len(docs) / off / raw_rate,
                                                                      3)
    out[f"embedded_events_per_s_redaction_on_{name}"] = round(len(files) * 500 / on)
    # The on/off difference of whole ingests is within this machine's noise; the share is the
    # measured per-event cost over the per-event ingest time with redaction on.
    out["redaction_share_of_ingest_time"] = round(
        out["redaction_cost_us_per_event"] / (on / (len(files) * 500) * 1e6), 3)

    log("false positives")
    events = [event for _, event, _ in real_logs()]
    out["redaction_false_positives_real_logs"] = sum(
        sum(redactor.redact_event(e, orjson.dumps(e))[1].values()) for e in events)
    out["redaction_false_positives_code_corpus"] = false_positives(redactor, code_corpus())
    texts, mb = python_sources()
    out["redaction_python_sources_mb"] = round(mb, 1)
    out["redaction_false_positives_python_sources"] = false_positives(redactor, texts)
    return out
