"""Fixtures: a fresh ShardSet + QueryService per test, built by factories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer import IndexConfig, QueryService, ShardSet

NOW = 10_000_000


@pytest.fixture
def make_index(tmp_path: Path) -> Iterator[Callable[..., tuple[ShardSet, QueryService]]]:
    opened: list[tuple[ShardSet, QueryService]] = []

    def factory(name: str = "idx", clock: Callable[[], float] | None = None,
                **config: Any) -> tuple[ShardSet, QueryService]:
        shards = ShardSet(tmp_path / name, IndexConfig(**config))
        service = QueryService(shards, clock=clock) if clock else QueryService(shards)
        opened.append((shards, service))
        return shards, service

    yield factory
    for shards, service in opened:
        service.close()
        shards.close()


@pytest.fixture
def index(make_index: Callable[..., tuple[ShardSet, QueryService]]) -> tuple[ShardSet, QueryService]:
    return make_index()
