"""A catch-up that fails on the index (left pending by a writer that died) marks the index
damaged instead of failing every command the same way: `index check` says so and names the fix,
and `recall reindex` — which needs the runtime to open — rebuilds it from the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datadirs import SAMPLES

from projections.errors import RECALL_INDEX_DAMAGED, RecallError, SessionQueryError
from streams.facade import Recall
from streams.runtime.embedded.runtime import EmbeddedRuntime


def test_a_catch_up_that_fails_on_the_index_leaves_a_damaged_index_reindex_repairs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    with Recall.open(data) as recall:
        recall.ingest([SAMPLES])
        sessions = len(recall.list_sessions())
    (data / "index-pending").write_bytes(b"")  # a writer died mid-write

    def failing(self: EmbeddedRuntime, *args: Any, **kwargs: Any) -> int:
        raise SessionQueryError("write failed: UNIQUE constraint failed: events.id",
                                code="SESSION_QUERY_INDEX_FAILED")

    real = EmbeddedRuntime.catch_up
    monkeypatch.setattr(EmbeddedRuntime, "catch_up", failing)
    with Recall.open(data) as recall:  # opening works: the failure is reported as damage
        with pytest.raises(RecallError) as caught:
            recall.list_sessions()
        assert caught.value.code == RECALL_INDEX_DAMAGED
        checked = recall.backend.runtime.check()
        assert not checked["ok"] and checked["fix"].startswith("recall reindex")
        assert any("caught up" in p for p in checked["problems"])
        monkeypatch.setattr(EmbeddedRuntime, "catch_up", real)
        recall.reindex()
        assert len(recall.list_sessions()) == sessions
    with Recall.open(data) as recall:
        assert recall.backend.runtime.check()["ok"]
