"""Importing real Claude Code and Codex excerpts end to end: ingest, search, lineage, surfaces."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from click.testing import CliRunner

from streams.faces.cli.main import main

REALDATA = Path(__file__).resolve().parents[1] / "data" / "realdata"


def run(data: Path, *args: str) -> object:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def test_real_logs_import_and_answer_questions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    report = run(data, "ingest", str(REALDATA))
    assert report["files"] == 4 and report["rejected"] == 0 and report["sessions"] == 6
    # a failing tool's error text is searchable, with its provenance
    page = run(data, "search", "File does not exist. Did you mean .golangci.yaml?")
    hit = page["items"][0]["bestMatch"]
    assert hit["type"] == "tool/result" and hit["sessionId"].startswith("claude-code:")
    # compaction maps to shadowed surfaces: the model no longer saw what came before
    shadowed = run(data, "search", "the", "--surface", "shadowed", "--limit", "100")
    assert {i["header"]["id"] for i in shadowed["items"]} >= {hit["sessionId"]}
    # subagent runs are their own sessions with lineage
    listing = run(data, "sessions")
    children = [i["header"] for i in listing if i["header"].get("parentSession")]
    assert len(children) == 2
    lineage = run(data, "trace", children[0]["id"])
    assert lineage["ancestors"][0]["id"] == children[0]["parentSession"]
    # codex exit codes are searchable too
    codex = run(data, "search", "EXIT_1", "--type", "tool/result")
    assert any(i["header"]["id"].startswith("codex:") for i in codex["items"])


def test_foreign_files_are_incremental(tmp_path: Path) -> None:
    source = tmp_path / "logs" / "codex.jsonl"
    source.parent.mkdir()
    lines = (REALDATA / "codex-0.125-parent.jsonl").read_bytes().splitlines(keepends=True)
    source.write_bytes(b"".join(lines[:40]))
    data = tmp_path / "data"
    first = run(data, "ingest", str(source))
    assert first["eventsAdded"] > 0 and first["rejected"] == 0
    assert run(data, "ingest", str(source))["unchanged"] == 1
    source.write_bytes(b"".join(lines))
    grown = run(data, "ingest", str(source))
    assert grown["eventsAdded"] > 0 and grown["rejected"] == 0
    assert grown["duplicateEvents"] == first["eventsAdded"]
    shutil.copy(REALDATA / "claude-code-2.1.5-compaction.jsonl", source)
    rewritten = run(data, "ingest", str(source))
    assert rewritten["rewritten"] == [str(source.resolve())] and rewritten["eventsAdded"] == 0
