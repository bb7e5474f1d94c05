"""Substring search works on any data dir: an index built without RECALL_SUBSTRING (reopened with
or without it) builds what `--substring` needs on first use, with progress on stderr, and keeps
it up to date afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from factories import header, user

from indexer import IndexConfig, QueryService, ShardSet
from projections.errors import RECALL_SUBSTRING_INDEX_MISSING, RecallError
from streams.facade import Recall
from streams.faces.cli.main import main
from tests.indexer.helpers import texts_session


def _log(path: Path, sid: str, text: str) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in [header(sid), user(0, text)]) + b"\n")
    return path


def _cli(data: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, Any, str]:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args], env=env)
    return result.exit_code, orjson.loads(result.stdout), result.stderr


def test_cli_substring_on_an_index_built_without_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    CliRunner().invoke(main, ["--data-dir", str(data), "ingest",
                              str(_log(tmp_path / "a.jsonl", "a", "the cabinet is open"))])
    code, page, err = _cli(data, "search", "abi", "--substring", "--json")
    assert code == 0, page
    assert [i["bestMatch"]["snippet"] for i in page["items"]] == ["the cabinet is open"]
    assert "building the substring index" in err
    # Later writes are covered without another build.
    CliRunner().invoke(main, ["--data-dir", str(data), "ingest",
                              str(_log(tmp_path / "b.jsonl", "b", "cabinets"))])
    code, page, err = _cli(data, "search", "abi", "--substring", "--json")
    assert code == 0 and [i["header"]["id"] for i in page["items"]] == ["b", "a"]
    assert "building" not in err


def test_reopened_with_recall_substring(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Recall.open(data, shards=2) as recall:
        recall.ingest([_log(tmp_path / "a.jsonl", "a", "the cabinet is open")])
        assert recall.search_sessions("abi")["items"] == []  # token mode: no such word
    with Recall.open(data, shards=2, substring=True) as recall:
        page = recall.search_sessions(request={"query": "abi", "mode": "substring"})
        assert [i["header"]["id"] for i in page["items"]] == ["a"]


def test_recall_index_substring_builds_it_as_a_step_of_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    CliRunner().invoke(main, ["--data-dir", str(data), "ingest",
                              str(_log(tmp_path / "a.jsonl", "a", "the cabinet is open"))])
    with Recall.open(data) as recall:
        assert not recall.substring_ready()
        assert recall.backend.call("substring_index", {})["built"] == "none"
    code, built, _ = _cli(data, "index", "substring", "--json")
    assert code == 0 and built == {"built": "all", "documentsAdded": 1}
    with Recall.open(data) as recall:
        assert recall.substring_ready()
    code, page, err = _cli(data, "search", "abi", "--substring", "--json")
    assert code == 0 and [i["header"]["id"] for i in page["items"]] == ["a"]
    assert "building" not in err
    code, again, _ = _cli(data, "index", "substring", "--json")
    assert code == 0 and again["documentsAdded"] == 0


def test_a_read_only_index_without_it_says_the_build_command(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    with ShardSet(root, IndexConfig(shards=2)) as writable:
        writable.write_batch(texts_session("alpha", ["the cabinet is open"]), {"src:0": 1})
    with ShardSet(root, IndexConfig(shards=2), read_only=True) as reading:
        service = QueryService(reading)
        try:
            with pytest.raises(RecallError) as caught:
                service.search_sessions({"query": "abi", "mode": "substring"})
        finally:
            service.close()
    assert caught.value.code == RECALL_SUBSTRING_INDEX_MISSING
    assert "read-only" in caught.value.message and "recall index substring" in caught.value.hint
