"""Shard files, routing, batched idempotent writes, tracking, conflicts, surface bookkeeping."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys

import pytest

from indexer import IndexConfig, ShardSet, SourceConflict, check_integrity, shard_of, shard_stats
from indexer.routing import shard_file_name
from indexer.schema import APPLICATION_ID, SCHEMA_VERSION
from projections.errors import SessionQueryError
from projections.fold import SurfaceState
from projections.records import EventRecord, HeaderRecord

from .helpers import event_records, header, session_records, texts_session, user


def test_files_are_owner_only_and_named_without_ids(tmp_path):
    root = tmp_path / "idx"
    with ShardSet(root, IndexConfig(shards=3)) as shards:
        shards.write_batch(texts_session("secret-session", ["hello"]), {"src:0": 1})
        names = sorted(p.name for p in root.iterdir())
        assert not any("secret" in n for n in names)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for name in [shard_file_name(i) for i in range(3)] + ["cursor.key"]:
            assert stat.S_IMODE((root / name).stat().st_mode) == 0o600
        conn = sqlite3.connect(root / shard_file_name(0))
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()


def test_foreign_and_newer_files_are_refused(tmp_path):
    root = tmp_path / "idx"
    root.mkdir()
    foreign = sqlite3.connect(root / shard_file_name(0))
    foreign.execute("CREATE TABLE x(a)")
    foreign.commit()
    foreign.close()
    with pytest.raises(SessionQueryError) as err:
        ShardSet(root, IndexConfig(shards=1))
    assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
    root2 = tmp_path / "idx2"
    ShardSet(root2, IndexConfig(shards=1)).close()
    conn = sqlite3.connect(root2 / shard_file_name(0))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SessionQueryError) as err:
        ShardSet(root2, IndexConfig(shards=1))
    assert err.value.code == "SESSION_QUERY_INDEX_FAILED"
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / shard_file_name(0)).write_bytes(b"not a database at all" * 100)
    with pytest.raises(SessionQueryError) as err:
        ShardSet(tmp_path / "junk", IndexConfig(shards=1))
    assert err.value.code == "SESSION_QUERY_INDEX_FAILED"


def test_reopen_with_other_shard_count_is_invalid_config(tmp_path):
    ShardSet(tmp_path / "i", IndexConfig(shards=2)).close()
    with pytest.raises(SessionQueryError) as err:
        ShardSet(tmp_path / "i", IndexConfig(shards=3))
    assert err.value.code == "SESSION_QUERY_INVALID_CONFIG"


@pytest.mark.parametrize("bad", [{"shards": 0}, {"default_limit": 0}, {"max_limit": 5, "default_limit": 6},
                                 {"snippet_chars": 0}, {"read_window_max": -1}, {"open_at": "later"},
                                 {"snapshot_retention_s": 0}, {"shards": True}])
def test_invalid_config(bad):
    with pytest.raises(SessionQueryError) as err:
        IndexConfig(**bad)
    assert err.value.code == "SESSION_QUERY_INVALID_CONFIG"


def test_routing_is_stable_across_processes():
    ids = ["a", "session-1", "會話", "x" * 300]
    here = [shard_of(i, 8) for i in ids]
    code = f"from indexer.routing import shard_of; print([shard_of(i, 8) for i in {ids!r}])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PYTHONPATH": "."})
    assert out.stdout.strip() == str(here)


def test_idempotent_rewrite_and_generation(index):
    shards, _ = index
    batch = texts_session("s1", ["alpha", "beta"])
    assert shards.write_batch(batch, {"docs:0": 3}) is True
    before = shards.generation_vector()
    stats = shard_stats(shards)
    assert shards.write_batch(batch, {"docs:0": 3}) is False
    assert shards.generation_vector() == before
    assert shard_stats(shards) == stats
    assert sum(s["events"] for s in stats) == 2
    assert shards.tracking_position("docs:0") == 3
    shards.write_batch([], {"docs:0": 2})  # tracking never moves back
    assert shards.tracking_position("docs:0") == 3
    assert shards.tracking_position("other") is None
    assert all(not v for v in check_integrity(shards).values())


def test_generation_bumps_once_per_changing_batch(make_index):
    shards, _ = make_index(shards=1)
    shards.write_batch(texts_session("s1", ["a", "b", "c"]), {})
    assert shards.shards[0].meta().generation == 1
    _, recs = event_records("s1", SurfaceState(3, 0, ()), [user(3, "d")])
    shards.write_batch(recs, {})
    assert shards.shards[0].meta().generation == 2


def test_conflicting_event_and_header_raise_and_roll_back(index):
    shards, service = index
    shards.write_batch(texts_session("s1", ["alpha"]), {"p": 1})
    other = texts_session("s1", ["different"])
    with pytest.raises(SourceConflict) as err:
        shards.write_batch([other[1], *texts_session("s2", ["new"])], {"p": 2})
    assert err.value.code == "SESSION_QUERY_SOURCE_CONFLICT"
    assert (err.value.session_id, err.value.seq) == ("s1", 0)
    # The whole batch rolled back: s2 absent, tracking unchanged.
    assert [i["header"]["id"] for i in service.list_sessions()] == ["s1"]
    assert shards.tracking_position("p") == 1
    with pytest.raises(SourceConflict):
        shards.write_batch([HeaderRecord("s1", header("s1", created=5))], {})
    # A header that differs only outside the key fields is accepted (first one kept).
    assert shards.write_batch([HeaderRecord("s1", header("s1", agentPreset="x"))], {}) is False


def test_replacement_shadows_and_orders_surface(index):
    shards, service = index
    events = [user(0, "zero"), user(1, "one"), user(2, "two"),
              user(3, "summary", op={"op": "replace", "start": 1, "end": 1}, cites=[1])]
    shards.write_batch(session_records("s", events), {})
    surface = service.read_surface("s")
    assert [e["seq"] for e in surface["events"]] == [0, 3, 2]
    assert surface["capturedThroughSeq"] == 3
    events2 = [user(4, "again", op={"op": "replace", "start": 3, "end": 2}, cites=[2, 3])]
    from projections.records import fold_records
    _, recs = fold_records("s", SurfaceState(), events + events2)
    shards.write_batch(recs, {})
    assert [e["seq"] for e in service.read_surface("s")["events"]] == [0, 4]
    surfaces = {e["seq"]: e["surface"] for e in service.filter_events("s", [])["events"]}
    assert surfaces == {0: "current", 1: "shadowed", 2: "shadowed", 3: "shadowed", 4: "current"}


def test_headerless_events_are_invisible_until_header(index):
    shards, service = index
    recs = texts_session("late", ["hidden words"])
    shards.write_batch(recs[1:], {})
    assert service.list_sessions() == []
    assert service.search_sessions({"query": "hidden"})["items"] == []
    shards.write_batch(recs[:1], {})
    assert len(service.search_sessions({"query": "hidden"})["items"]) == 1


def test_session_positions_live_in_the_session_shard(make_index):
    shards, _ = make_index(shards=4)
    shards.write_batch(texts_session("s1", ["a"]), {"store:s1": 1, "topic:0": 7})
    home = shards.shard_for("s1")
    assert home.tracking()["store:s1"] == 1
    assert all("store:s1" not in s.tracking() for s in shards if s is not home)
    assert all(s.tracking()["topic:0"] == 7 for s in shards)
    assert shards.tracking_position("store:s1") == 1
    assert shards.tracking_position("topic:0") == 7


def test_block_dictionaries_are_trained_once_enough_blocks_exist_and_deterministically(tmp_path):
    # 70 sessions x 40 events: 140 blocks of one shard, past the first training point (64)
    from indexer.blocks import TRAINING, decode_block
    from indexer.schema import BLOCK_EVENTS

    sessions = {f"dict-{i:03d}": texts_session(
        f"dict-{i:03d}", [f"message {i} number {j} about compiler flags and test runs"
                          for j in range(40)]) for i in range(70)}
    assert len(sessions) * 40 // BLOCK_EVENTS >= TRAINING[0][0]
    dictionaries = []
    for name in ("a", "b"):
        root = tmp_path / name
        with ShardSet(root, IndexConfig(shards=1)) as shards:
            for sid, records in sessions.items():
                shards.write_batch(records, {f"src:{sid}": 1})
        conn = sqlite3.connect(root / shard_file_name(0))
        epoch = conn.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()[0]
        dictionaries.append(conn.execute("SELECT id, data FROM dictionaries").fetchall())
        used = set()
        raws: list[bytes] = []
        for (data,) in conn.execute("SELECT data FROM blocks"):
            used.add(data[0])
            raws.extend(decode_block(conn, epoch, data).values())
        conn.close()
        assert sorted(raws) == sorted(
            r.raw for records in sessions.values() for r in records
            if isinstance(r, EventRecord))
        assert 1 in used  # the blocks written after the training use the dictionary
    assert len(dictionaries[0]) == 1 and dictionaries[0] == dictionaries[1]
