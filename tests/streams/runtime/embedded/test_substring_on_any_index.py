"""Substring search works on any data dir: an index built without RECALL_SUBSTRING (reopened with
or without it) builds what `--substring` needs on first use, with progress on stderr, and keeps
it up to date afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from factories import header, user

from streams.facade import Recall
from streams.faces.cli.main import main


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
