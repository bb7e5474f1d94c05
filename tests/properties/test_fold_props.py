"""Hypothesis properties of fold_surface: determinism, incremental == batch, closed classification."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from factories import assistant, checkpoint, log_only, replace, tool_result, user
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import FoldError, apply, classify_surfaces, fold_surface, plan
from projections.events import SURFACE_TYPES
from projections.fold import SurfaceState, decode_state, encode_state, encode_step


@st.composite
def valid_logs(draw: st.DrawFn, max_events: int = 60) -> list[dict[str, Any]]:
    """Random valid logs: appends of every eligible type, log-only events, compactions of random
    positional ranges (including replacements of replacements) and tool-result prunes."""
    events: list[dict[str, Any]] = []
    nodes: list[int] = []
    tools: dict[int, dict[str, Any]] = {}
    for seq in range(draw(st.integers(0, max_events))):
        choice = draw(st.sampled_from(["user", "assistant", "tool", "log", "compact", "prune"]))
        text = draw(st.text(max_size=12))
        if choice == "compact" and nodes:
            i = draw(st.integers(0, len(nodes) - 1))
            j = draw(st.integers(i, len(nodes) - 1))
            shadowed = nodes[i:j + 1]
            extra = draw(st.lists(st.sampled_from(range(seq)), max_size=2, unique=True)) if seq else []
            cited = shadowed + [s for s in extra if s not in shadowed]
            events.append(checkpoint(seq, text, nodes[i], nodes[j], cited))
            nodes[i:j + 1] = [seq]
        elif choice == "prune" and any(n in tools for n in nodes):
            target = draw(st.sampled_from([n for n in nodes if n in tools]))
            pruned = copy.deepcopy(tools[target])
            pruned.update(seq=seq, surfaceOp=replace(target, target), sourceEventSeqs=[target])
            pruned["data"]["message"]["content"][0]["content"] = "[pruned]"
            events.append(pruned)
            tools[seq] = pruned
            nodes[nodes.index(target)] = seq
        elif choice == "log" or choice in ("compact", "prune"):
            events.append(log_only(seq, draw(st.sampled_from(["turn/start", "step/end",
                                                              "tool/call"]))))
        else:
            event = {"user": user, "assistant": assistant, "tool": tool_result}[choice](seq, text)
            if choice == "tool":
                tools[seq] = event
            events.append(event)
            nodes.append(seq)
    return events


@settings(max_examples=150, deadline=None)
@given(valid_logs())
def test_fold_is_deterministic(events: list[dict[str, Any]]) -> None:
    first = fold_surface(events)
    again = fold_surface(copy.deepcopy(events))
    assert first.nodes == again.nodes and first.replacements == again.replacements
    assert orjson.dumps(classify_surfaces(events)) == orjson.dumps(classify_surfaces(events))


@settings(max_examples=100, deadline=None)
@given(valid_logs())
def test_incremental_equals_batch_for_every_prefix(events: list[dict[str, Any]]) -> None:
    state: SurfaceState | None = None
    for n, event in enumerate(events, start=1):
        state = apply(state, event)
        batch = fold_surface(events[:n])
        assert state.nodes == batch.nodes
        assert state == batch.state


@settings(max_examples=150, deadline=None)
@given(valid_logs())
def test_eligible_events_end_current_or_shadowed_and_others_log_only(
        events: list[dict[str, Any]]) -> None:
    for event, surface in zip(events, classify_surfaces(events), strict=True):
        if event["type"] in SURFACE_TYPES:
            assert surface in ("current", "shadowed")
        else:
            assert surface == "log-only"


@settings(max_examples=150, deadline=None)
@given(valid_logs(), st.data())
def test_a_rejected_event_leaves_the_state_unchanged(events: list[dict[str, Any]],
                                                     data: st.DataObject) -> None:
    state = fold_surface(events).state
    before = encode_state(state)
    seq = len(events)
    bad = data.draw(st.sampled_from([
        user(seq + 1, "gap"),
        user(seq, "no op", op=None),
        log_only(seq, surfaceOp="append"),
        checkpoint(seq, "x", 10_000, 10_000, [0] if seq else []),
        user(seq, "future", cited=[seq]),
    ]))
    if bad.get("surfaceOp", "absent") is None:
        del bad["surfaceOp"]
    try:
        plan(state, bad)
    except FoldError:
        pass
    else:  # pragma: no cover - every candidate above is invalid
        raise AssertionError(f"accepted {bad}")
    assert encode_state(state) == before


@settings(max_examples=100, deadline=None)
@given(valid_logs())
def test_state_serialization_round_trips_and_deltas_rebuild_it(events: list[dict[str, Any]]) -> None:
    state = SurfaceState()
    table: dict[str, bytes] = dict(encode_state(state))
    for event in events:
        step = plan(state, event)
        for key, value in encode_step(step).items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        state = step.state
    assert decode_state(encode_state(state)) == state
    # applying only the per-step deltas, as a changelog-backed table does, gives the same state
    assert decode_state(table) == state
