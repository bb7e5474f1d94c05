"""fold_surface: the PROTOCOL §2 rules and every pinned edge case."""

from __future__ import annotations

import copy

import pytest
from factories import assistant, checkpoint, log_only, replace, tool_result, user

from projections import Event, FoldError, Surface, apply, classify_surfaces, fold_surface, plan
from projections.fold import (
    PAGE_SIZE,
    SurfaceState,
    decode_state,
    encode_state,
    encode_step,
)


def test_appends_build_the_surface_in_order() -> None:
    events = [user(0, "a"), log_only(1), assistant(2, "b"), tool_result(3, "out")]
    fold = fold_surface(events)
    assert fold.nodes == [0, 2, 3]
    assert fold.replacements == []
    assert classify_surfaces(events) == ["current", "log-only", "current", "current"]


def test_partial_shadowing_takes_the_range_position() -> None:
    base = [user(0, "a"), assistant(1, "b"), user(2, "c")]
    head = fold_surface([*base, checkpoint(3, "sum", 0, 1, [0, 1])])
    assert head.nodes == [3, 2]
    middle = fold_surface([*base, checkpoint(3, "sum", 1, 1, [1])])
    assert middle.nodes == [0, 3, 2]
    assert middle.replacements[0].shadowed_seqs == (1,)


def test_replacement_of_a_replacement_with_start_numerically_after_end() -> None:
    events = [user(0, "a"), assistant(1, "b"), checkpoint(2, "s1", 0, 0, [0]),
              checkpoint(3, "s2", 2, 1, [2, 1])]
    fold = fold_surface(events)
    assert fold.nodes == [3]
    assert [(r.seq, r.start, r.end, r.shadowed_seqs) for r in fold.replacements] == [
        (2, 0, 0, (0,)), (3, 2, 1, (2, 1))]
    assert classify_surfaces(events) == ["shadowed", "shadowed", "shadowed", "current"]


def test_positional_start_after_end_is_an_error() -> None:
    events = [user(0, "a"), assistant(1, "b"), checkpoint(2, "s", 1, 0, [0, 1])]
    with pytest.raises(FoldError, match=r"start seq 1 \(index 1\) is after end seq 0 \(index 0\)"):
        fold_surface(events)


def test_events_after_compaction_append_after_the_replacement() -> None:
    events = [user(0, "a"), assistant(1, "b"), checkpoint(2, "s", 0, 1, [0, 1]), user(3, "c"),
              checkpoint(4, "s2", 3, 3, [3])]
    assert fold_surface(events).nodes == [2, 4]


def test_contiguity_is_required() -> None:
    with pytest.raises(FoldError, match="seq 2 is not contiguous; expected 1"):
        fold_surface([user(0, "a"), user(2, "b")])
    with pytest.raises(FoldError, match="not contiguous; expected 0"):
        fold_surface([user(1, "a")])


def test_windowed_fold_rejects_a_replacement_reaching_before_the_window() -> None:
    window = [user(5, "a"), checkpoint(6, "s", 4, 5, [4, 5])]
    with pytest.raises(FoldError, match="start seq 4 not found"):
        fold_surface(window, base_seq=5)
    assert fold_surface(window[:1], base_seq=5).nodes == [5]


@pytest.mark.parametrize("op", [None, "replace", {"op": "replace", "start": 0},
                                {"op": "replace", "start": 0, "end": 0, "x": 1},
                                {"op": "swap", "start": 0, "end": 0},
                                {"op": "replace", "start": -1, "end": 0},
                                {"op": "replace", "start": True, "end": 0}])
def test_eligible_events_need_a_valid_surface_op(op: object) -> None:
    event = user(1, "b")
    event["surfaceOp"] = op
    if op is None:
        del event["surfaceOp"]
    with pytest.raises(FoldError, match="surfaceOp"):
        fold_surface([user(0, "a"), event])


def test_log_only_events_cannot_carry_surface_markers() -> None:
    with pytest.raises(FoldError, match="not surface-eligible and cannot carry surfaceOp"):
        fold_surface([log_only(0, surfaceOp="append")])
    with pytest.raises(FoldError, match="cannot carry sourceEventSeqs"):
        fold_surface([log_only(0, sourceEventSeqs=[])])


@pytest.mark.parametrize("cited, message", [
    ("0", "must be an array"),
    ([], "must not be empty"),
    ([0, 0], "duplicate"),
    ([1.5], "non-negative safe integers"),
    ([-1], "non-negative safe integers"),
    ([2], "not earlier"),
    ([1], "not earlier"),
])
def test_provenance_rules(cited: object, message: str) -> None:
    event = user(1, "b")
    event["sourceEventSeqs"] = cited
    with pytest.raises(FoldError, match=message):
        fold_surface([user(0, "a"), event])


def test_empty_provenance_is_allowed_only_on_assistant_messages() -> None:
    assert fold_surface([assistant(0, "a", cited=[])]).nodes == [0]


def test_replacement_must_cite_every_shadowed_seq() -> None:
    with pytest.raises(FoldError, match=r"missing shadowed seqs \[1\]"):
        fold_surface([user(0, "a"), user(1, "b"), checkpoint(2, "s", 0, 1, [0])])
    absent = user(1, "s", op=replace(0, 0))
    with pytest.raises(FoldError, match="missing"):
        fold_surface([user(0, "a"), absent])


def test_replacement_range_must_be_on_the_current_surface() -> None:
    events = [user(0, "a"), user(1, "b"), checkpoint(2, "s", 0, 0, [0])]
    with pytest.raises(FoldError, match="start seq 0 not found in surface"):
        fold_surface([*events, checkpoint(3, "s", 0, 1, [0, 1])])
    with pytest.raises(FoldError, match="end seq 9 not found in surface"):
        fold_surface([*events, checkpoint(3, "s", 1, 9, [1])])


def test_tool_result_rewrite_may_change_only_content() -> None:
    original = tool_result(1, "huge output", call_id="c1")
    pruned = tool_result(2, "[pruned]", call_id="c1", op=replace(1, 1), cited=[1])
    pruned["data"]["message"]["id"] = original["data"]["message"]["id"]
    fold = fold_surface([user(0, "a"), original, pruned])
    assert fold.nodes == [0, 2]
    assert classify_surfaces([user(0, "a"), original, pruned])[1] == "shadowed"


@pytest.mark.parametrize("mutate", [
    lambda d: d["message"]["content"][0].__setitem__("toolCallId", "other"),
    lambda d: d["message"]["content"][0].__setitem__("isError", True),
    lambda d: d["message"].__setitem__("id", "other"),
    lambda d: d.__setitem__("turn", 7),
    lambda d: d.__setitem__("step", 7),
    lambda d: d.__setitem__("meta", {"x": 1}),
    lambda d: d.__setitem__("error", {"name": "E", "code": "X"}),
])
def test_tool_result_rewrite_rejects_any_other_change(mutate: object) -> None:
    original = tool_result(1, "out")
    pruned = tool_result(2, "[pruned]", op=replace(1, 1), cited=[1])
    pruned["data"]["message"]["id"] = original["data"]["message"]["id"]
    mutate(pruned["data"])  # type: ignore[operator]
    with pytest.raises(FoldError, match="may change only content"):
        fold_surface([user(0, "a"), original, pruned])


def test_tool_result_may_replace_exactly_one_tool_result() -> None:
    two = tool_result(3, "x", op=replace(1, 2), cited=[1, 2])
    with pytest.raises(FoldError, match="exactly one tool/result"):
        fold_surface([user(0, "a"), tool_result(1, "o1"), tool_result(2, "o2"), two])
    not_tool = tool_result(1, "x", op=replace(0, 0), cited=[0])
    with pytest.raises(FoldError, match="exactly one tool/result"):
        fold_surface([user(0, "a"), not_tool])


def test_a_rejected_event_leaves_the_state_untouched() -> None:
    state = apply(apply(None, user(0, "a")), user(1, "b"))
    before = copy.deepcopy(encode_state(state))
    with pytest.raises(FoldError):
        plan(state, checkpoint(2, "s", 1, 0, [0, 1]))
    assert encode_state(state) == before
    assert apply(state, checkpoint(2, "s", 0, 1, [0, 1])).nodes == [2]


def test_accepts_parsed_models_and_plain_dicts_alike() -> None:
    events = [user(0, "a"), assistant(1, "b"), checkpoint(2, "s", 0, 0, [0])]
    models = [Event.model_validate(e) for e in events]
    assert fold_surface(models).nodes == fold_surface(events).nodes == [2, 1]
    assert classify_surfaces(models) == classify_surfaces(events)
    assert all(isinstance(s, Surface) for s in classify_surfaces(models))


def test_every_eligible_event_ends_current_or_shadowed() -> None:
    events = [user(0, "a"), log_only(1, "turn/end", {"reason": "completed"}), assistant(2, "b"),
              checkpoint(3, "s", 0, 2, [0, 2])]
    assert classify_surfaces(events) == ["shadowed", "log-only", "shadowed", "current"]


def test_paged_state_round_trips_and_writes_only_changed_pages() -> None:
    state: SurfaceState | None = None
    for seq in range(PAGE_SIZE * 3 + 5):
        step = plan(state or SurfaceState(), user(seq, "x"))
        written = encode_step(step)
        assert set(written) == {"m", f"p{seq // PAGE_SIZE}"}
        state = step.state
    assert state is not None
    assert decode_state(encode_state(state)) == state
    # a compaction across pages rewrites the tail, deletes pages that no longer exist
    n = state.next_seq
    cp = checkpoint(n, "s", 3, n - 2, list(range(3, n - 1)))
    step = plan(state, cp)
    written = encode_step(step)
    assert written["p0"] is not None
    assert written["p1"] is None and written["p2"] is None and written["p3"] is None
    assert step.state.nodes == [0, 1, 2, n, n - 1]
    records = {k: v for k, v in encode_state(step.state).items()}
    assert decode_state(records) == step.state


def test_decode_state_refuses_partial_records() -> None:
    state = apply(None, user(0, "a"))
    records = encode_state(state)
    del records["p0"]
    with pytest.raises(FoldError, match="incomplete"):
        decode_state(records)
