"""Multi-line human views (show, surface, the web page) render a message's tabs and line feeds
as layout, while every character that could harm a terminal stays escaped; one-line views
(listings, hits) still escape tabs and newlines."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from factories import assistant, header, log_only, user

from projections.codec import dumps
from streams.faces.cli.main import main
from streams.faces.textsafe import visible


def test_multi_line_text_keeps_tabs_and_newlines_and_escapes_the_rest() -> None:
    text = "col\tvalue\nnext\x1b[2J\r\u202e"
    assert visible(text, keep_newlines=True) == "col\tvalue\nnext\\x1b[2J\\r\\u202e"
    assert visible(text) == "col\\tvalue\\nnext\\x1b[2J\\r\\u202e"


def test_show_renders_a_tab_as_layout(tmp_path: Path) -> None:
    log = tmp_path / "tabs.jsonl"
    log.write_bytes(dumps(header("tabs-1", cwd="/w")) + b"\n"
                    + dumps(user(0, "name\tsize\nalpha\t12")) + b"\n")
    data = str(tmp_path / "data")
    runner = CliRunner()
    assert runner.invoke(main, ["--data-dir", data, "ingest", str(log)]).exit_code == 0
    shown = runner.invoke(main, ["--data-dir", data, "show", "tabs-1", "0"])
    assert shown.exit_code == 0, shown.output
    assert "\\t" not in shown.output
    assert any(line.strip().startswith("alpha") and line.strip().endswith("12")
               for line in shown.output.splitlines())


def test_show_lays_out_a_tool_calls_arguments(tmp_path: Path) -> None:
    message = assistant(1, "running it")
    message["data"]["message"]["content"].append(
        {"type": "tool-call", "id": "c1", "name": "shell",
         "arguments": {"cmd": "cd /w\nmake test", "timeout": 30}})
    call = log_only(2, "tool/call", {"turn": 0, "step": 0, "callId": "c1", "name": "shell",
                                     "arguments": {"cmd": "cd /w\nmake test", "timeout": 30}})
    log = tmp_path / "calls.jsonl"
    log.write_bytes(b"".join(dumps(x) + b"\n" for x in [header("calls-1", cwd="/w"),
                                                        user(0, "run the tests"), message, call]))
    data = str(tmp_path / "data")
    runner = CliRunner()
    assert runner.invoke(main, ["--data-dir", data, "ingest", str(log)]).exit_code == 0
    for seq in ("1", "2"):
        shown = runner.invoke(main, ["--data-dir", data, "show", "calls-1", seq, "--before",
                                     "0", "--after", "0"])
        assert shown.exit_code == 0, shown.output
        assert "\\n" not in shown.output
        lines = [line.strip() for line in shown.output.splitlines()]
        assert "cmd: cd /w" in lines and "make test" in lines and "timeout: 30" in lines
