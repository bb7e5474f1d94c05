"""The ingest summary counts the sessions that exist afterwards: an imported session whose every
line was parked (a Copilot CLI log cut before its `session.start`) is not one of them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from streams.faces.cli.main import main

AGENTS = Path(__file__).resolve().parents[2] / "data" / "agents"


def test_a_session_whose_lines_were_all_parked_is_not_counted(tmp_path: Path) -> None:
    lines = (AGENTS / "copilot-cli-1.0.74-compaction.jsonl").read_bytes().splitlines(True)
    assert b'"session.start"' in lines[0]
    cut = tmp_path / "events.jsonl"
    cut.write_bytes(b"".join(lines[2:]))  # no session.start: nothing names the session
    runner = CliRunner()
    data = str(tmp_path / "data")
    result = runner.invoke(main, ["--data-dir", data, "ingest", str(cut), "--format",
                                  "copilot-cli", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["rejected"] > 0 and report["eventsAdded"] == 0
    listed = json.loads(runner.invoke(main, ["--data-dir", data, "sessions", "--json"]).stdout)
    assert report["sessions"] == len(listed) == 0
