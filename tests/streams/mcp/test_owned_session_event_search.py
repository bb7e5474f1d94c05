"""`session_event_search` on the caller's own session that recall writes (`recall create` +
`recall append`): until a `step/start` marks its active step there is nothing "prior" to search
(PROTOCOL §6.2), and the error says what to do; once its host appends steps, it searches."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from streams.facade import Recall
from streams.faces.cli.main import main
from streams.faces.mcp import Caller, SessionTools


def test_own_search_of_a_session_recall_writes_says_how_to_give_it_steps(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    runner = CliRunner()
    for argv in (["create", "--id", "owned-1", "--cwd", "/w"],
                 ["append", "owned-1", "--message", "the widget broke again"]):
        done = runner.invoke(main, ["--data-dir", str(data), *argv])
        assert done.exit_code == 0, done.output
    recall = Recall.open(data)
    try:
        tools = SessionTools(recall)
        caller = Caller("owned-1", "/w")
        text = tools.call("session_event_search", {"query": "widget"}, caller).text
        assert text.startswith("Error: the current session has no step to search before")
        assert "recall append SESSION --events FILE" in text
        recall.append_events("owned-1", [{"type": "step/start", "data": {"turn": 0, "step": 1}}])
        found = tools.call("session_event_search", {"query": "widget"}, caller).text
        assert "widget broke again" in found, found
    finally:
        recall.close()
