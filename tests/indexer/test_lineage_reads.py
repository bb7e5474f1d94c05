"""`trace_session` reads only the headers of the session's lineage (its parent chain by id, its
descendants through the parent index) and answers exactly what the lineage over every header
answers: on a random forest across shards with orphans, shared parents and parent cycles."""

from __future__ import annotations

import random
from typing import Any

import pytest

from indexer.lineage import trace_lineage
from projections.errors import SessionQueryError
from projections.records import HeaderRecord

from .helpers import header


def _answer(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except SessionQueryError as exc:
        return exc.code


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lineage_from_the_parent_index_is_the_whole_sets(make_index: Any, seed: int) -> None:
    shards, service = make_index(name=f"forest-{seed}", shards=3)
    rng = random.Random(seed)
    ids = [f"s{i}" for i in range(60)]
    headers: dict[str, dict[str, Any]] = {}
    for i, sid in enumerate(ids):
        roll = rng.random()
        extra: dict[str, Any] = {}
        if roll < 0.6 and i:
            extra["parentSession"] = ids[rng.randrange(i)]  # a tree edge
        elif roll < 0.7:
            extra["parentSession"] = rng.choice(ids)  # maybe a cycle, maybe itself
        elif roll < 0.75:
            extra["parentSession"] = "gone"  # an orphan
        headers[sid] = header(sid, rng.randrange(5), **extra)
    shards.write_batch([HeaderRecord(sid, h) for sid, h in headers.items()], {})
    for sid in [*ids, "gone"]:
        assert _answer(service.trace_session, sid) == _answer(trace_lineage, headers, sid), sid
