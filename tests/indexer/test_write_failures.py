"""A write that fails on an I/O error (a full disk, a file size limit) leaves no cached ids
behind: SQLite may roll such a transaction back by itself, and ids handed out from a cache that
outlived it were stored without their extents — every later process then failed with
`UNIQUE constraint failed: events.id`."""

from __future__ import annotations

from typing import Any

import apsw
import pytest

import indexer.writer
from indexer.maintenance import check_integrity
from projections.errors import SessionQueryError

from .helpers import texts_session


def test_a_write_sqlite_rolled_back_itself_leaves_no_stale_ids(
        make_index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    shards, service = make_index("idx", shards=1)
    shards.write_batch(texts_session("a", ["first text"]), {})
    real = indexer.writer.apply_records

    def failing(writer: Any, records: Any) -> bool:
        real(writer, records)  # ids and an extent for "b", cached by the writer
        writer.conn.execute("ROLLBACK")  # what SQLite does itself on some I/O errors
        raise apsw.IOError("disk I/O error")

    monkeypatch.setattr(indexer.writer, "apply_records", failing)
    with pytest.raises(SessionQueryError) as caught:
        shards.write_batch(texts_session("b", ["second text"]), {})
    assert caught.value.code == "SESSION_QUERY_INDEX_FAILED"
    monkeypatch.undo()
    shards.write_batch(texts_session("b", ["second text", "third text"]), {})  # the retry
    other, _ = make_index("idx", shards=1)  # the next process
    other.write_batch(texts_session("c", ["fourth text"]), {})
    assert all(not p for p in check_integrity(other).values())
    found = service.search_sessions({"query": "text"})["items"]
    assert sorted(i["bestMatch"]["sessionId"] for i in found) == ["a", "b", "c"]
