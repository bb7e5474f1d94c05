"""Shared fixtures for every test tier (factories live in tests/support, on pytest's pythonpath)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "streams" / "samples"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture
def write_log(tmp_path: Path) -> Callable[..., Path]:
    """Write a native log (header + events, or raw lines) to a file under tmp_path."""

    def write(name: str, header: dict[str, Any] | None, events: list[Any] = (),  # type: ignore[assignment]
              *, raw_lines: list[bytes] | None = None, directory: Path | None = None) -> Path:
        folder = directory or tmp_path / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [] if header is None else [orjson.dumps(header)]
        lines += [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]
        lines += raw_lines or []
        path = folder / name
        path.write_bytes(b"\n".join(lines) + b"\n")
        return path

    return write


@pytest.fixture
def recall(tmp_path: Path) -> Iterator[Any]:
    """An embedded Recall over a fresh data dir."""
    from streams.facade import Recall

    with Recall.open(tmp_path / "data") as instance:
        yield instance
