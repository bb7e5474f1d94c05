"""Ids, cwds, titles and snippets are printed as data, in the CLI and in MCP `session_search`:
rich markup (`x[/bold]`, `[link=…]`) is never interpreted, ANSI/OSC escapes, control characters
and newlines are written as escapes, so a hostile id cannot forge a result line."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner
from factories import header, user

from streams.facade import Recall
from streams.faces.cli.main import main

ESC = "\x1b"
HOSTILE = [
    ("x[/bold]", "/w"),
    ("[link=https://evil.example]click[/link]", "/w"),
    ("evil\n2. forged-session  cwd /w", "/w"),
    (f"osc{ESC}]8;;https://evil.example{ESC}\\here{ESC}]8;;{ESC}\\", f"/w{ESC}[2J"),
]


def _corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for n, (sid, cwd) in enumerate(HOSTILE):
        lines = [header(sid, cwd=cwd), user(0, f"needle {ESC}[31mred{ESC}[0m")]
        (folder / f"{n}.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    data = tmp_path / "data"
    with Recall.open(data) as recall:
        assert recall.ingest([folder]).to_json()["sessions"] == len(HOSTILE)
    return data


def _human(data: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_cli_prints_hostile_metadata_as_data(tmp_path: Path) -> None:
    data = _corpus(tmp_path)
    for args in (("search", "needle"), ("sessions",), ("events", HOSTILE[2][0], "needle")):
        out = _human(data, *args)
        assert ESC not in out and "\x07" not in out
        assert "forged-session" not in out or "evil\\n2. forged-session" in out
    out = _human(data, "search", "needle", "--limit", "10")
    assert "x[/bold]" in out and "[link=https://evil.example]click[/link]" in out
    assert not any(line.startswith("2. forged") for line in out.splitlines())
    assert "\\x1b[31mred\\x1b[0m" in out and "osc\\x1b]8;;https://evil.example" in out


def test_mcp_session_search_text_cannot_be_forged(tmp_path: Path) -> None:
    from streams.faces.mcp import Caller, SessionTools

    data = _corpus(tmp_path)
    with Recall.open(data) as recall:
        answer = SessionTools(recall).call("session_search", {"query": "needle"},
                                           Caller("x[/bold]", "/w"))
    assert not answer.is_error
    lines = answer.text.splitlines()
    # the other two sessions of workspace /w (the caller itself and the /w+ESC one are not hits)
    assert [line[:3] for line in lines if line[:1].isdigit()] == ["1. ", "2. "]
    assert ESC not in answer.text and "Session evil\\n2. forged-session  cwd /w —" in answer.text
