"""The set-based append path of `apply_records` writes exactly what the per-record path writes.

Both paths run over the same record streams (fresh appends, interleaved sessions, compactions,
CJK and empty texts, replays, headers after events, conflicts); the shards must then agree on
the logical digest, on every table row by row (rowids included) and on the FTS index contents.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import indexer.writer
from indexer import IndexConfig, ShardSet
from indexer.blocks import decode_block
from indexer.digest import index_digest
from indexer.errors import SourceConflict
from indexer.writer import ShardWriter, apply_records
from projections.errors import SessionQueryError
from projections.fold import Replacement, SurfaceState
from projections.records import EventRecord, HeaderRecord, IndexRecord, fold_records
from projections.surfaces import Surface

from .helpers import assistant, header, structural, user

WORDS = ["alpha", "beta", "needle", "gamma", "déjà", "vu", "検索", "テスト", "한국어", "x"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))


def _session_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """n events: messages, structural events and compactions (replace ops citing the span)."""
    events: list[dict[str, Any]] = []
    nodes: list[int] = []
    time = rng.randint(0, 10_000)
    for seq in range(n):
        time += rng.choice([0, 1, 5, -3])  # times need not be monotonic
        roll = rng.random()
        if len(nodes) >= 5 and roll < 0.15:
            shadow = nodes[: rng.randint(1, len(nodes) - 1)]
            events.append(user(seq, _text(rng), time=time,
                               op={"op": "replace", "start": shadow[0], "end": shadow[-1]},
                               cites=shadow))
            nodes = [seq, *nodes[len(shadow):]]
        elif roll < 0.35:
            events.append(structural(seq, rng.choice(["turn/start", "step/start"]), time=time))
        elif roll < 0.65:
            events.append(assistant(seq, _text(rng), time=time))
            nodes.append(seq)
        else:
            events.append(user(seq, _text(rng), time=time))
            nodes.append(seq)
    return events


def _stream(seed: int) -> list[list[IndexRecord]]:
    """Write batches: sessions interleaved, split at random, some records sent again."""
    rng = random.Random(seed)
    per_session: list[list[IndexRecord]] = []
    for s in range(rng.randint(2, 6)):
        sid = f"s{s}"
        _, records = fold_records(sid, SurfaceState(), _session_events(rng, rng.randint(1, 40)))
        head: list[IndexRecord] = [HeaderRecord(sid, header(sid, created=rng.randint(0, 9000)))]
        # Sometimes the header arrives after some of the events.
        at = rng.choice([0, 0, rng.randint(0, len(records))])
        per_session.append([*records[:at], *head, *records[at:]])
    merged: list[IndexRecord] = []
    while any(per_session):
        source = rng.choice([r for r in per_session if r])
        take = rng.randint(1, 5)
        merged.extend(source[:take])
        del source[:take]
    return _split(rng, merged)


def _split(rng: random.Random, records: list[IndexRecord]) -> list[list[IndexRecord]]:
    batches: list[list[IndexRecord]] = []
    i = 0
    while i < len(records):
        size = rng.randint(1, 30)
        batch = records[i:i + size]
        if i and rng.random() < 0.3:  # a replay of some earlier records
            lo = rng.randint(0, i - 1)
            batch = records[lo:rng.randint(lo + 1, i)] + batch
        batches.append(batch)
        i += size
    batches.append(records[: len(records) // 2])  # a late replay of the first half
    return batches


def _dump(shards: ShardSet) -> list[Any]:
    """Every table row by row (keys included; compressed blocks by their decoded entries). The
    FTS indexes are compared logically: their segment b-trees legitimately differ (FTS5 flushes
    its pending terms at every statement, so the per-record path leaves many small segments
    where a batched INSERT leaves one), so what is compared is every (term, rowid, column,
    offset) instance and FTS5's own integrity check."""
    out: list[Any] = []
    for shard in shards:
        conn = shard.writer
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            if table.startswith(("events_fts", "events_tri")) or table == "dictionaries":
                continue
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            if table == "meta":
                rows = [r for r in rows if r[0] != "epoch"]
            if table == "blocks":
                rows = [(i, sorted(decode_block(conn, shard.epoch, bytes(d)).items()))
                        for i, d in rows]
            out.append((shard.index, table, sorted(rows, key=repr)))
        for fts in ("events_fts", "events_tri"):
            conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_v"
                         f" USING fts5vocab(main, {fts}, instance)")
            out.append((shard.index, fts, conn.execute(
                f"SELECT term, doc, col, offset FROM temp.{fts}_v"
                " ORDER BY term, doc, col, offset").fetchall()))
    return out


@pytest.fixture
def both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[Callable[[list[list[IndexRecord]], bool], tuple[Any, Any]]]:
    opened: list[ShardSet] = []

    def run(batches: list[list[IndexRecord]], substring: bool) -> tuple[Any, Any]:
        results = []
        for batched in (True, False):
            shards = ShardSet(tmp_path / f"{len(opened)}", IndexConfig(shards=3,
                                                                     substring=substring))
            opened.append(shards)
            monkeypatch.setattr(indexer.writer, "apply_records",
                                functools.partial(apply_records, batched=batched))
            changed, errors = [], []
            for i, batch in enumerate(batches):
                try:
                    changed.append(shards.write_batch(batch, {"p": i}))
                except SessionQueryError as exc:
                    errors.append((i, exc.code, str(exc), exc.session_id, exc.seq))
            results.append((changed, errors, index_digest(shards), _dump(shards)))
        return results[0], results[1]

    yield run
    for shards in opened:
        shards.close()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("substring", [False, True])
def test_batched_and_per_record_paths_write_identical_shards(both: Any, seed: int,
                                                             substring: bool) -> None:
    batches = _stream(seed)
    batched, per_record = both(batches, substring)
    assert batched == per_record
    assert batched[2]["events"] > 0


def _records(sid: str, events: list[dict[str, Any]]) -> list[IndexRecord]:
    _, recs = fold_records(sid, SurfaceState(), events)
    return [HeaderRecord(sid, header(sid)), *recs]


def test_conflicts_after_fresh_appends_roll_back_identically(both: Any) -> None:
    base = _records("a", [user(0, "one"), user(1, "two")])
    changed = _records("a", [user(0, "one"), user(1, "CHANGED")])
    fresh_b = _records("b", [user(0, "bee"), structural(1), assistant(2, "検索 b")])
    batches = [base, [*fresh_b, *changed[1:]], fresh_b]
    batched, per_record = both(batches, False)
    assert batched == per_record
    assert [e[1] for e in batched[1]] == ["SESSION_QUERY_SOURCE_CONFLICT"]


def test_replacement_from_a_log_only_start_conflicts_in_both_paths(both: Any) -> None:
    recs = _records("a", [user(0, "zero"), structural(1)])
    bad = EventRecord("a", 2, "user/message", 1002, Surface.CURRENT, "summary", b'{"seq":2}',
                      Replacement(2, 1, 1, (1,)))
    within = [*recs, bad]  # the start is in the same fresh run
    later = [recs, [bad]]  # the start is already stored
    for batches in ([within], later):
        batched, per_record = both(batches, False)
        assert batched == per_record
        assert batched[1][0][1] == "SESSION_QUERY_SOURCE_CONFLICT"
        assert "starts at seq 1" in batched[1][0][2]


def test_replacement_shadowing_rows_of_the_same_run(both: Any) -> None:
    events = [user(0, "zero"), user(1, "one"), user(2, "two"),
              user(3, "summary", op={"op": "replace", "start": 1, "end": 1}, cites=[1]),
              user(4, "again", op={"op": "replace", "start": 3, "end": 2}, cites=[2, 3])]
    recs = _records("s", events)
    for batches in ([recs], [recs[:3], recs[3:]], [recs[:5], recs[2:]]):
        batched, per_record = both(batches, True)
        assert batched == per_record
        assert batched[1] == []


def test_a_conflicting_batch_raises_source_conflict_directly(tmp_path: Path) -> None:
    shards = ShardSet(tmp_path / "i", IndexConfig(shards=1))
    try:
        shards.write_batch(_records("a", [user(0, "one")]), {})
        shard = shards.shards[0]
        conn = shard.writer
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(SourceConflict):
            apply_records(ShardWriter(conn, shard.epoch, substring=False),
                          _records("a", [user(0, "other"), user(1, "x")]))
        conn.execute("ROLLBACK")
    finally:
        shards.close()
