"""A directory walk looks at content, not only at names: Gemini CLI documents outside `chats/` or
under other names and Copilot's legacy JSON are read; files that look like agent logs but that
no format recognises are listed (path, why, the `--format` that forces them), and a walk that
finds nothing says what a walk reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from streams.faces.cli.main import main

AGENTS = Path(__file__).resolve().parents[2] / "data" / "agents"


def _ingest(data: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--data-dir", str(data), "ingest", *args])
    return result.exit_code, result.stdout


def _tree(root: Path) -> Path:
    logs = root / "logs"
    (logs / "exports").mkdir(parents=True)
    # a Gemini CLI chat outside its `chats/` folder, and one exported under another name
    shutil.copy(AGENTS / "gemini-cli-0.34" / "session-2026-03-18T01-46-50316244.json",
                logs / "session-2026-03-18T01-46-50316244.json")
    shutil.copy(AGENTS / "gemini-cli-2025-10-pomodoro.json", logs / "exports" / "pomodoro.json")
    shutil.copy(AGENTS / "copilot-cli-2025-10-legacy.json", logs / "copilot-history.json")
    # session-like keys, but no supported format's shape
    (logs / "mystery.json").write_text(json.dumps(
        {"sessionId": "m-1", "messages": [{"role": "user", "content": "hello"}]}, indent=2))
    (logs / "settings.json").write_text(json.dumps({"theme": "dark"}))
    return logs


def test_a_walk_reads_agent_documents_whatever_their_name(tmp_path: Path) -> None:
    logs = _tree(tmp_path)
    code, out = _ingest(tmp_path / "data", str(logs), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["files"] == 3 and report["sessions"] >= 3
    assert [item["path"] for item in report["passedOver"]] == [str(logs / "mystery.json")]
    item = report["passedOver"][0]
    assert "sessionId" in item["why"] and "--format FORMAT" in item["force"]
    assert "gemini-cli" in item["force"]


def test_files_passed_over_are_listed_with_how_to_force_them(tmp_path: Path) -> None:
    logs = _tree(tmp_path)
    code, out = _ingest(tmp_path / "data", str(logs))
    assert code == 0, out
    assert out.startswith("3 files")
    assert "passed over: " in out and "mystery.json" in out and "settings.json" not in out
    assert "recall ingest --format FORMAT" in out


def test_a_walk_that_finds_no_log_says_what_a_walk_reads(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# not a log\n")
    code, out = _ingest(tmp_path / "data", str(docs))
    assert code == 0 and out.startswith("0 files")
    assert "no agent log found" in out and "--format" in out
