"""The ingest fast paths keep every verdict and every byte.

- the hand check of event envelopes accepts only what the pydantic model accepts, and whatever
  it declines gets the model's own rejection (same code, same message);
- a line kept as the event's serialization is exactly what dumping the event gives, so the
  store and the index hold the same bytes whatever the line's spelling (non-canonical
  lines are re-dumped);
- store fsyncs are deferred to one per batch, but the index never commits a batch before the
  store holds it durably, and an ingest returns with nothing left unsynced;
- the writer thread's short GIL switch interval is restored when the pipeline closes.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from indexer import IndexConfig, ShardSet
from indexer.digest import index_digest
from indexer.pipeline import BULK_GC_THRESHOLDS, bulk_mode
from projections.codec import loads_canonical
from projections.errors import InputRejected
from projections.events import Event, _rejection_from, parse_event
from projections.logformat import LogBuilder
from streams.facade import Recall

from ...indexer.helpers import texts_session

_SAFE = 2**53 - 1
_values = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4),
    st.integers(min_value=-_SAFE - 3, max_value=_SAFE + 3),
    st.floats(allow_nan=False, allow_infinity=False), st.just(-0.0), st.just(0.0),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "op", "start"]), st.integers(-2, 2), max_size=2))
_keys = st.sampled_from(["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs",
                         "ignorable", "surface_op", "extra", "source_event_seqs"])
_envelopes = st.one_of(
    st.dictionaries(_keys, _values, max_size=8),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["user/message", "turn/start", "", "x"]),
         "seq": st.one_of(st.integers(min_value=-2, max_value=_SAFE + 2), st.booleans()),
         "time": st.one_of(st.integers(min_value=-_SAFE - 2, max_value=_SAFE + 2),
                           st.floats(allow_nan=False, allow_infinity=False)),
         "data": _values},
        optional={"surfaceOp": _values, "sourceEventSeqs": _values,
                  "ignorable": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
                  "extra": _values}))


def _model_verdict(value: dict[str, Any]) -> tuple[str, str] | None:
    """What the pydantic model alone says (the rejection as parse_event words it)."""
    try:
        Event.model_validate(value)
    except ValidationError as exc:
        rejection = _rejection_from(exc, "event")
        return rejection.code, rejection.message
    return None


def _canonical_line(value: dict[str, Any]) -> bytes | None:
    """The line a reader would pass as `canonical` for `value` (None if it would pass none)."""
    try:
        line = orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except orjson.JSONEncodeError:
        return None
    parsed, is_canonical = loads_canonical(line)
    assert parsed == value
    return line if is_canonical else None


@settings(max_examples=400, deadline=None)
@given(_envelopes)
def test_the_fast_check_keeps_the_models_verdicts(value: dict[str, Any]) -> None:
    canonical = _canonical_line(value)
    expected = _model_verdict(value)
    try:
        parse_event(value, canonical=canonical)
        got = None
    except InputRejected as exc:
        got = exc.code, exc.message
    assert got == expected


_BASE = {"type": "turn/start", "seq": 0, "time": 1, "data": {}}


@pytest.mark.parametrize("change", [
    {"seq": -1}, {"seq": _SAFE + 1}, {"seq": True}, {"seq": 1.0}, {"time": -_SAFE - 1},
    {"time": _SAFE + 1}, {"time": False}, {"type": ""}, {"type": 3}, {"ignorable": 1},
    {"ignorable": None}, {"ignorable": False}, {"extra": 1}, {"surface_op": "append"},
    {"source_event_seqs": [0]}, {"data": {"n": _SAFE + 1}}, {"data": [0.5, -0.0]}, {},
])
def test_boundary_envelopes_get_the_models_verdict(change: dict[str, Any]) -> None:
    value = {**_BASE, **change}
    for canonical in (None, _canonical_line(value)):
        try:
            parse_event(value, canonical=canonical)
            got = None
        except InputRejected as exc:
            got = exc.code, exc.message
        assert got == _model_verdict(value)
    without_data = {k: v for k, v in value.items() if k != "data"}
    with pytest.raises(InputRejected):
        parse_event(without_data)


def test_a_negative_zero_in_data_is_refused_on_the_fast_path() -> None:
    line = b'{"type":"turn/start","seq":0,"time":1,"data":{"x":-0.0}}'
    value, canonical = loads_canonical(line)
    assert canonical  # orjson writes -0.0 back as it was: the line check alone cannot tell
    with pytest.raises(InputRejected) as exc:
        parse_event(value, canonical=line)
    assert exc.value.code == "INGEST_SCHEMA_VIOLATION"
    assert "-0 is not lossless JSON" in exc.value.message


def _feed(lines: list[bytes]) -> LogBuilder:
    builder = LogBuilder()
    for number, line in enumerate(lines, start=1):
        builder.feed_line(number, line)
    return builder


def test_kept_lines_are_exactly_the_dumped_events() -> None:
    header = b'{"type":"session","version":0,"id":"s","createdAt":1}'
    canonical = b'{"type":"turn/start","seq":0,"time":5,"data":{"t":"caf\xc3\xa9"}}'
    spaced = b'{"type": "turn/start", "seq": 1, "time": 6, "data": {"t": "caf\\u00e9"}}'
    builder = _feed([header, canonical, spaced])
    assert not builder.log.rejections
    assert builder.log.raws == [canonical, None]  # the spaced line is dumped again
    for event, raw in zip(builder.log.events, builder.log.raws, strict=True):
        assert raw is None or raw == orjson.dumps(event)


def test_the_store_holds_the_same_bytes_whatever_the_lines_spelling(tmp_path: Path) -> None:
    head = {"type": "session", "version": 0, "id": "s", "createdAt": 1}
    events = [{"type": "user/message", "seq": 0, "time": 2, "surfaceOp": "append",
               "data": {"role": "user", "content": [{"type": "text", "text": "naïve ☃"}]}},
              {"type": "turn/start", "seq": 1, "time": 3, "data": {}}]
    compact = b"\n".join(orjson.dumps(v) for v in [head, *events]) + b"\n"
    spaced = b"\n".join(
        orjson.dumps(v).replace(b":", b": ").replace("naïve".encode(), b"na\\u00efve")
        if i else orjson.dumps(v) for i, v in enumerate([head, *events])) + b"\n"
    stored = []
    for name, text in (("compact", compact), ("spaced", spaced)):
        source = tmp_path / f"{name}.jsonl"
        source.write_bytes(text)
        with Recall.open(tmp_path / f"data-{name}") as recall:
            report = recall.ingest([source])
            assert report.events_added == 2 and not report.rejected
            runtime = recall.backend.runtime
            assert not runtime.store._unsynced  # an ingest returns with the store durable
            stored.append(runtime.store.path_of("s").read_bytes())
            digest = index_digest(runtime.shards)
            stored.append(orjson.dumps(digest, option=orjson.OPT_SORT_KEYS))
    assert stored[0] == compact
    assert stored[0] == stored[2] and stored[1] == stored[3]


def test_the_writer_runs_before_hooks_first_and_an_error_in_one_stops_its_batch(
        tmp_path: Path) -> None:
    order: list[str] = []
    first, second = texts_session("a", ["alpha"]), texts_session("b", ["beta"])
    with ShardSet(tmp_path / "idx", IndexConfig(shards=2)) as shards:
        def failing() -> None:
            raise OSError("disk gone")
        with pytest.raises(OSError, match="disk gone"), shards.pipeline():
            shards.submit(first, {"store:a": 1}, before=lambda: order.append("synced a"))
            shards.submit(second, {"store:b": 1}, before=failing)
        assert order == ["synced a"]
        assert shards.tracking_position("store:a") == 1
        assert shards.tracking_position("store:b") is None  # its source was not durable


def test_the_switch_interval_and_gc_thresholds_are_restored_after_the_pipeline(
        tmp_path: Path) -> None:
    before, thresholds = sys.getswitchinterval(), gc.get_threshold()
    with ShardSet(tmp_path / "idx", IndexConfig(shards=1)) as shards:
        with shards.pipeline():
            assert sys.getswitchinterval() < before
            assert gc.get_threshold()[0] > thresholds[0]
            shards.submit(texts_session("a", ["alpha"]), {"store:a": 1})
        assert sys.getswitchinterval() == before
        assert gc.get_threshold() == thresholds


def test_bulk_mode_nests_with_a_writer_thread_and_restores_the_thresholds(
        tmp_path: Path) -> None:
    before, thresholds = sys.getswitchinterval(), gc.get_threshold()
    with ShardSet(tmp_path / "idx", IndexConfig(shards=1)) as shards:
        with bulk_mode():
            raised = gc.get_threshold()
            assert raised[0] > thresholds[0] and sys.getswitchinterval() < before
            with shards.pipeline():  # a writer thread starts and stops inside the block
                shards.submit(texts_session("a", ["alpha"]), {"store:a": 1})
            assert gc.get_threshold() == raised
        assert gc.get_threshold() == thresholds and sys.getswitchinterval() == before


@pytest.mark.parametrize(("role", "bulk"), [("fold", True), ("index", True), ("query", False)])
def test_the_fold_and_index_roles_run_with_the_bulk_gc_thresholds(
        monkeypatch: pytest.MonkeyPatch, role: str, bulk: bool) -> None:
    from streams.core.settings import Settings
    from streams.runtime.kafka import worker

    seen: list[tuple[int, int, int]] = []
    monkeypatch.setattr(worker, "_run_fold", lambda *a, **k: seen.append(gc.get_threshold()))
    monkeypatch.setattr(worker, "_run_service", lambda *a, **k: seen.append(gc.get_threshold()))
    monkeypatch.delenv(worker.SUPERVISOR_ENV, raising=False)
    thresholds = gc.get_threshold()
    try:
        worker.run_role(Settings(broker="127.0.0.1:9"), role)
    finally:
        gc.set_threshold(*thresholds)
    assert seen == [BULK_GC_THRESHOLDS if bulk else thresholds]
