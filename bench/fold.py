"""Fold benchmark: events/s of the incremental fold and changelog bytes written per event."""

from __future__ import annotations

import time
from typing import Any

import orjson

from bench.corpus import TextGen, session_events
from projections.fold import SurfaceState, encode_step, plan


def measure(n: int, gen: TextGen) -> tuple[float, float, float]:
    """(events/s, paged-state bytes per event, whole-state bytes per event as the baseline)."""
    events = list(session_events(f"bench-{n}", n, gen))
    state = SurfaceState()
    written = 0
    start = time.perf_counter()
    for event in events:
        step = plan(state, event)
        written += sum(len(v) + len(k) for k, v in encode_step(step).items() if v is not None)
        state = step.state
    elapsed = time.perf_counter() - start
    # Baseline: a table value holding the whole surface, rewritten on every event.
    naive = 0
    state = SurfaceState()
    for event in events:
        state = plan(state, event).state
        naive += len(orjson.dumps({"n": state.next_seq, "nodes": state.nodes}))
    return len(events) / elapsed, written / len(events), naive / len(events)


def run() -> dict[str, Any]:
    gen = TextGen(7)
    results: dict[str, Any] = {}
    rates = []
    for n, name in [(1_000, "1k"), (10_000, "10k"), (50_000, "50k")]:
        rate, per_event, naive = measure(n, gen)
        rates.append(rate)
        results[f"fold_state_bytes_per_event_{name}"] = round(per_event, 1)
        results[f"fold_state_bytes_per_event_whole_state_{name}"] = round(naive, 1)
    results["fold_events_per_s"] = round(sorted(rates)[1])
    return results
