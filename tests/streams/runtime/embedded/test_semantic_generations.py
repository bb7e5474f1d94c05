"""Semantic vectors are carried by generations: `reindex` and `replay` rebuild them from the store
with the same bytes the ingest wrote, and a search by meaning answers the same afterwards."""

from __future__ import annotations

from pathlib import Path

from streams.facade import Recall


def vectors(recall: Recall) -> dict[tuple[str, int], bytes]:
    found: dict[tuple[str, int], bytes] = {}
    for shard in recall.backend.runtime.shards:  # type: ignore[attr-defined]
        with shard.reader() as conn:
            for sid, seq, blob in conn.execute(
                    "SELECT s.id, x.seq + v.event - x.first, group_concat(hex(v.v), '')"
                    " FROM vectors v JOIN extents x ON v.event >= x.first"
                    " AND v.event < x.first + x.size JOIN sessions s ON s.no = x.session"
                    " GROUP BY v.event"):
                found[(str(sid), int(seq))] = bytes.fromhex(str(blob))
    return found


def test_reindex_and_replay_rebuild_the_same_vectors(tmp_path: Path, samples_dir: Path) -> None:
    with Recall.open(tmp_path / "d", semantic=True) as recall:
        recall.ingest([samples_dir])
        ingested = vectors(recall)
        before = recall.search_sessions("the build keeps failing", mode="hybrid")
        assert ingested and before["items"]
        recall.reindex()
        assert vectors(recall) == ingested
        recall.replay()
        assert vectors(recall) == ingested
        assert recall.search_sessions("the build keeps failing", mode="hybrid") == before
