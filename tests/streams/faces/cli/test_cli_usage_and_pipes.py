"""The CLI's rough edges a new user meets first: a search without its QUERY is a usage error
(exit 2, "missing QUERY"), and a reader that closes the pipe early (`recall sessions | head -1`)
ends the command quietly with the status a shell gives a writer SIGPIPE ends (141)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from datadirs import SAMPLES, recall_cmd, spawn_recall
from factories import header, user

from projections.codec import dumps
from streams.faces.cli.main import main


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("cli") / "data"
    assert recall_cmd(data, "ingest", str(SAMPLES)).returncode == 0
    return data


@pytest.mark.parametrize("argv", [["search"], ["events", "ci-billing-2025-11-24"],
                                  ["search", "--json"]])
def test_a_search_without_its_query_is_a_usage_error(data: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *argv])
    assert result.exit_code == 2, result.output
    assert "missing QUERY" in result.output
    assert "must be a string" not in result.output


@pytest.mark.parametrize("argv", [["sessions"], ["search", "the"],
                                  ["surface", "ci-billing-2025-11-24"]])
def test_a_closed_pipe_ends_the_command_quietly(data: Path, argv: list[str]) -> None:
    process = spawn_recall(data, *argv)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line is written
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141
    assert stderr == b""


def test_a_reference_without_a_source_is_a_usage_error_and_appends_nothing(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    runner = CliRunner()
    created = runner.invoke(main, ["--data-dir", str(data), "create", "--id", "t-1", "--cwd",
                                   "/w", "--json"])
    assert created.exit_code == 0, created.output
    result = runner.invoke(main, ["--data-dir", str(data), "reference", "--target", "t-1",
                                  "--message", "see the earlier run"])
    assert result.exit_code == 2, result.output
    assert "needs a source" in result.output and "recall append" in result.output
    shown = runner.invoke(main, ["--data-dir", str(data), "trace", "t-1", "--json"])
    assert "see the earlier run" not in shown.output


def test_an_event_trace_shows_the_start_of_the_body_not_all_of_it(tmp_path: Path) -> None:
    body = "\n".join(f"line {n} of a long prompt" for n in range(100))
    log = tmp_path / "long.jsonl"
    log.write_bytes(dumps(header("long-1", cwd="/w")) + b"\n" + dumps(user(0, body)) + b"\n")
    data = str(tmp_path / "data")
    runner = CliRunner()
    assert runner.invoke(main, ["--data-dir", data, "ingest", str(log)]).exit_code == 0
    result = runner.invoke(main, ["--data-dir", data, "trace", "long-1", "0"])
    assert result.exit_code == 0, result.output
    assert "line 0 of a long prompt" in result.output
    assert "line 99 of a long prompt" not in result.output
    assert "97 more lines: recall show long-1 0" in result.output
    assert "replaced by: none" in result.output and len(result.output.splitlines()) < 15


def test_candidates_have_a_header_row_and_the_listing_titles(tmp_path: Path) -> None:
    log = tmp_path / "two.jsonl"
    log.write_bytes(b"".join(dumps(x) + b"\n" for x in [
        header("cand-target", cwd="/w"), user(0, "what now")]))
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"".join(dumps(x) + b"\n" for x in [
        header("cand-other", cwd="/w"), user(0, "fix the flaky widget test")]))
    data = str(tmp_path / "data")
    runner = CliRunner()
    assert runner.invoke(main, ["--data-dir", data, "ingest", str(log), str(other)]).exit_code == 0
    result = runner.invoke(main, ["--data-dir", data, "candidates", "--target", "cand-target"])
    assert result.exit_code == 0, result.output
    head, *rows = result.output.splitlines()
    assert head.split() == ["session", "title", "cwd", "mention"]
    row = next(r for r in rows if r.startswith("cand-other"))
    assert "fix the flaky widget test" in row and "/w" in row and "@[" in row
