"""The web page's transcript: injected context (a harness's permissions block, AGENTS.md, …) and
thinking-only messages are shown collapsed, not as a screen of text or "(no text)"; a tool call
appears once (its tool/call entry), not also as the assistant message that made it; the favicon
is served and a missing page is the error page with a next step for a browser user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from factories import assistant, header, log_only, tool_result, user
from starlette.testclient import TestClient

from indexer import matchcount
from projections.codec import dumps
from streams.facade import Recall
from streams.faces.ui import pages
from streams.faces.ui.app import create_app

LOCAL = "http://127.0.0.1"


def _calling(seq: int) -> list[dict[str, Any]]:
    message = assistant(seq, "")
    message["data"]["message"]["content"] = [
        {"type": "tool-call", "id": f"c{seq}", "name": "shell", "arguments": {"cmd": "ls"}}]
    call = log_only(seq + 1, "tool/call", {"turn": 0, "step": 0, "callId": f"c{seq}",
                                           "name": "shell", "arguments": {"cmd": "ls"}})
    return [message, call]


EVENTS = [
    user(0, "<permissions instructions>\n" + "sandbox rule\n" * 80, kind="plugin",
         plugin="environment"),
    user(1, "list the files"),
    assistant(2, "", reasoning="the user wants a listing"),
    *_calling(3),
    tool_result(5, "README.md", call_id="c3"),
    assistant(6, "there is a README"),
]


def test_injected_context_and_thinking_are_their_own_collapsed_kinds() -> None:
    entries = {e.seq: e for e in pages.transcript(EVENTS)}
    assert entries[0].kind == "injected" and "sandbox rule" in entries[0].text
    assert entries[1].kind == "message"
    assert entries[2].kind == "thinking" and "wants a listing" in entries[2].text
    assert "(no text)" not in entries[2].text


def test_a_tool_call_is_shown_once() -> None:
    entries = pages.transcript(EVENTS)
    assert [e.seq for e in entries if "cmd" in e.text] == [4]
    assert 3 not in {e.seq for e in entries}


def test_the_session_page_collapses_them_and_the_site_has_no_bare_404s(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    log.write_bytes(b"".join(dumps(x) + b"\n" for x in [header("page-1", cwd="/w"), *EVENTS]))
    recall = Recall.open(tmp_path / "data")
    try:
        recall.ingest([log])
        client = TestClient(create_app(recall), base_url=LOCAL)
        page = client.get("/session", params={"id": "page-1"}).text
        assert '<details class="injected-body">' in page and '<details class="thinking-body">' in page
        assert "(no text)" not in page
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")
        for url in ("/no-such-page", "/session?id=nope"):
            missing = client.get(url)
            assert missing.status_code == 404 and "Something went wrong" in missing.text
            assert "`recall" not in missing.text and "Sessions page" in missing.text
    finally:
        recall.close()


def test_a_tool_calls_arguments_are_laid_out_on_the_page() -> None:
    message, call = _calling(0)
    call["data"]["arguments"] = {"cmd": "cd /w\n\tmake test"}
    (entry,) = [e for e in pages.transcript([message, call]) if e.kind == "tool"]
    assert "cmd: cd /w\n\tmake test" in entry.text and "\\n" not in entry.text


def test_every_page_says_which_match_count_implementation_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recall = Recall.open(tmp_path / "data")
    try:
        client = TestClient(create_app(recall), base_url=LOCAL)
        expected = "compiled C extension" if matchcount.compiled_path() else "Python fallback"
        assert f"match count: {expected}" in client.get("/").text
        monkeypatch.setattr(matchcount, "_COMPILED", None)
        monkeypatch.setattr(matchcount, "_registered", "python")
        assert "match count: Python fallback" in client.get("/search").text
    finally:
        recall.close()
