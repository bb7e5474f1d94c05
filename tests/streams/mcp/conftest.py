"""Fixtures for the agent-tool tests: an ingested data dir and the environment of a server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from streams.facade import Recall

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SHARDS = 2

# corpus.py sits beside this file; make `mcp_corpus` importable for every test file.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from mcp_corpus import write_corpus  # noqa: E402


def build_data_dir(root: Path) -> Path:
    """Ingest the crafted sessions and the samples into a fresh data dir (then close it, so the
    server subprocess is its only user)."""
    data_dir = root / "data"
    recall = Recall.open(data_dir, shards=SHARDS)
    try:
        report = recall.ingest(write_corpus(root / "sources"))
        assert report.rejected == 0
    finally:
        recall.close()
    return data_dir


def server_env() -> dict[str, str]:
    """The subprocess environment: no RECALL_* leaking in from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env["RECALL_SHARDS"] = str(SHARDS)
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data_dir(tmp_path_factory.mktemp("mcp-corpus"))


@pytest.fixture
def recall(tmp_path: Path) -> Recall:
    """An in-process Recall over a private copy of the corpus."""
    opened = Recall.open(build_data_dir(tmp_path), shards=SHARDS)
    yield opened  # type: ignore[misc]
    opened.close()
