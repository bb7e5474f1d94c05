"""Multi-line human views (show, surface, the web page) render a message's tabs and line feeds
as layout, while every character that could harm a terminal stays escaped; one-line views
(listings, hits) still escape tabs and newlines."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from factories import header, user

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
