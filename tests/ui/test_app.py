"""`recall ui` at the HTTP edge (Starlette's TestClient, no browser): the access token off
loopback, Host checks on loopback, the append form's anti-forgery token, escaping, errors."""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from distribution import declared_distribution
from starlette.testclient import TestClient

from projections.errors import RecallError
from streams.facade import Recall
from streams.faces.cli.main import main
from streams.faces.cli.ui import require_extra
from streams.faces.ui import pages
from streams.faces.ui.app import TOKEN_COOKIE, create_app, session_url
from tests.ui import corpus

LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus.build(tmp_path_factory.mktemp("ui-app"))


@pytest.fixture
def recall(data: Path) -> Iterator[Recall]:
    with Recall.open(data) as opened:
        yield opened


def test_loopback_serves_loopback_hosts_only(recall: Recall, data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    assert client.get("/").status_code == 200
    # a page elsewhere that rebinds its own name to 127.0.0.1 sends its own Host header
    assert client.get("/", headers={"host": "evil.example:8080"}).status_code == 400
    response = client.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"


def test_off_loopback_every_request_needs_the_token(recall: Recall, data: Path) -> None:
    app = create_app(recall, token="s3cret-token", loopback=False, data_dir=data)
    client = TestClient(app, base_url="http://192.0.2.10:8000", follow_redirects=False)
    for path in ("/", "/search?q=EUR", "/static/ui.css", "/dead-letters"):
        assert client.get(path).status_code == 401, path
    assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/?token=wrong").status_code == 401
    assert client.get("/", headers={"authorization": "Bearer s3cret-token"}).status_code == 200
    # the printed URL's ?token= sets an HttpOnly cookie and leaves the address bar clean
    first = client.get("/search?q=EUR&token=s3cret-token")
    assert first.status_code == 303 and first.headers["location"] == "/search?q=EUR"
    assert "httponly" in first.headers["set-cookie"].lower()
    assert client.cookies.get(TOKEN_COOKIE) == "s3cret-token"
    assert client.get("/search?q=EUR").status_code == 200


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def test_append_needs_the_form_token_and_a_session_recall_writes(recall: Recall,
                                                                 data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    form = {"target": "ci-followup-2025-12-01", "message": "same one?",
            "source": ["ci-billing-2025-11-24", "", ""], "label": ["CI", "", ""]}
    preview = client.get("/reference", params={"target": form["target"],
                                               "source": "ci-billing-2025-11-24"})
    before = recall.read_session("ci-followup-2025-12-01")["events"]
    forged = client.post("/reference", data={**form, "csrf": "guessed"})
    assert forged.status_code == 403
    assert len(recall.read_session("ci-followup-2025-12-01")["events"]) == len(before)
    done = client.post("/reference", data={**form, "csrf": _csrf(preview.text)})
    assert done.status_code == 200 and 'id="appended"' in done.text
    after = recall.read_session("ci-followup-2025-12-01")["events"]
    assert len(after) == len(before) + 2
    assert after[-1]["data"]["content"][0]["text"] == "same one?"
    # an agent's session: refused even with a valid form token
    refused = client.post("/reference", data={**form, "target": "ci-billing-2025-11-24",
                                              "source": ["docs-quickstart"],
                                              "csrf": _csrf(preview.text)})
    assert refused.status_code == 409 and "RECALL_NOT_WRITER" in refused.text


def test_hostile_text_is_escaped_in_the_html(recall: Recall, data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    for path in ("/", f"/session?id={corpus.HOSTILE_SESSION}", "/search?q=window",
                 f"/event?id={corpus.HOSTILE_SESSION}&seq=1&raw=1"):
        html = client.get(path).text
        assert "<script>window" not in html and "<img" not in html and "<svg" not in html
        assert "\u202e" not in html, path
    html = client.get(f"/session?id={corpus.HOSTILE_SESSION}").text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.__pwned = 2&#34;&gt;" in html


def test_errors_are_pages_with_codes(recall: Recall, data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    missing = client.get("/session?id=no-such-session")
    assert missing.status_code == 404 and "SESSION_QUERY_SESSION_NOT_FOUND" in missing.text
    assert client.get("/event?id=ci-billing&seq=x").status_code == 400
    assert "SESSION_QUERY_EVENT_NOT_FOUND" in client.get("/event?id=ci-billing&seq=999").text
    bad_date = client.get("/search?q=EUR&since=yesterday")
    assert bad_date.status_code == 400 and "ISO dates" in bad_date.text


def test_search_pages_with_a_cursor_and_keeps_the_filters(recall: Recall, data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    html = client.get("/search", params={"q": "EUR", "session": "ci-billing",
                                         "type": "tool/result assistant/message"}).text
    hits = re.findall(r'data-seq="(\d+)"', html)
    expected = recall.search_events("ci-billing", "EUR", limit=pages.SEARCH_PAGE, filters=[
        {"kind": "type", "values": ["tool/result", "assistant/message"]}])
    assert [int(h) for h in hits] == [i["seq"] for i in expected["items"]]
    # a page of one: the next link carries the cursor and the same filters
    ui = client.app.state.ui  # type: ignore[attr-defined]
    first = ui.search_page(pages.SearchForm(query="EUR", surfaces=("current", "shadowed")))
    assert first["hits"]
    manual = recall.search_sessions("EUR", limit=pages.SEARCH_PAGE, event_filters=[
        {"kind": "surface", "values": ["current", "shadowed"]}])
    assert [h.session_id for h in first["hits"]] == [
        i["bestMatch"]["sessionId"] for i in manual["items"]]


def test_segments_mark_only_matches_and_never_emit_markup() -> None:
    assert pages.segments(pages.mark_query("a café <b>here</b>", "CAFE")) == [
        ("a ", False), ("café", True), (" <b>here</b>", False)]
    assert pages.segments("\ufdd0open \u202e") == [("open \\u202e", True)]
    assert pages.segments(pages.mark_query("no match", "absent")) == [("no match", False)]
    assert pages.segments(pages.mark_query("BRAID", "AI")) == [("BRAID", False)]


def test_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def without_jinja(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "jinja2":
            raise ModuleNotFoundError("No module named 'jinja2'", name="jinja2")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_jinja)
    with pytest.raises(RecallError) as caught:
        require_extra()
    assert caught.value.code == "RECALL_MISSING_EXTRA"
    assert f"pip install '{declared_distribution()}[ui]'" in caught.value.hint
    result = CliRunner().invoke(main, ["ui", "--json"])
    assert '"RECALL_MISSING_EXTRA"' in result.output


def test_dead_letters_page_reads_them_through_the_facade(recall: Recall, data: Path) -> None:
    """The page lists `Recall.dead_letters()` (over Kafka: the topic), not a file it opens."""
    client = TestClient(create_app(recall, data_dir=None), base_url=LOCAL)
    page = client.get("/dead-letters")
    parked = recall.dead_letters()
    assert page.status_code == 200 and parked
    assert f"{len(parked)} parked records" in page.text
    assert all(str(d["code"]) in page.text for d in parked)


def test_demo_ends_with_the_ui_command(tmp_path: Path) -> None:
    kept = tmp_path / "kept demo"
    result = CliRunner().invoke(main, ["demo", "--keep", str(kept)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1].strip()
    assert last == f"recall --data-dir '{kept}' ui"
    temporary = CliRunner().invoke(main, ["demo"])
    assert temporary.output.strip().splitlines()[-1].strip() == (
        "recall demo --keep /tmp/recall-demo && recall --data-dir /tmp/recall-demo ui")


def test_reference_preview_shows_the_budget_and_what_was_left_out(data: Path) -> None:
    with Recall.open(data, max_reference_bytes=400) as small:
        client = TestClient(create_app(small, data_dir=data), base_url=LOCAL)
        html = client.get("/reference", params={"target": "ci-followup-2025-12-01",
                                                 "source": "ci-billing-2025-11-24"}).text
        expected = small.prepare_reference("ci-followup-2025-12-01", "", references=[
            {"sessionId": "ci-billing-2025-11-24"}], dry_run=True)
    provenance = expected["additionalContext"]["source"]["references"][0]
    assert provenance["truncated"] and provenance["omittedMessages"] == 1
    used = re.search(r'class="num bytes">(\d+) / 400<', html)
    assert used is not None and int(used.group(1)) <= 400
    assert (f"yes: 1 messages, {provenance['omittedBytes']} bytes left out") in html


def test_cli_off_loopback_requires_the_token(tmp_path: Path, data: Path) -> None:
    own = tmp_path / "data"
    recall_bin = Path(sys.executable).with_name("recall")
    proc = subprocess.Popen([str(recall_bin), "--data-dir", str(own), "ui", "--host", "0.0.0.0",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        info = orjson.loads(proc.stdout.readline())
        assert info["tokenRequired"] is True and info["host"] == "0.0.0.0"
        token = (own / "ui-token").read_text().strip()
        assert info["url"].endswith(f"/?token={token}")
        assert os.stat(own / "ui-token").st_mode & 0o777 == 0o600
        base = f"http://127.0.0.1:{info['port']}/"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(base, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200 and b"Sessions" in answer.read()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_long_session_is_paged_and_a_link_to_an_event_opens_its_page(tmp_path: Path) -> None:
    """A transcript longer than a page is split; `at=SEQ` (every link to an event in context)
    opens the page holding it; the pager walks every entry exactly once."""
    total = pages.TRANSCRIPT_PAGE * 2 + 17
    with Recall.open(tmp_path / "data") as recall:
        recall.create_session("ui-long-session", cwd="/home/dev/long")
        recall.append_events("ui-long-session", [
            {"type": "user/message", "surfaceOp": "append",
             "data": {"role": "user", "content": [{"type": "text", "text": f"line {n}"}]}}
            for n in range(total)])
        client = TestClient(create_app(recall, data_dir=tmp_path / "data"), base_url=LOCAL)
        _walk_long_session(client, total)


def _walk_long_session(client: TestClient, total: int) -> None:
    seqs: list[int] = []
    for number in (1, 2, 3):
        html = client.get(f"/session?id=ui-long-session&page={number}").text
        assert f"Page {number} of 3" in html
        seqs += [int(s) for s in re.findall(r'<article id="seq-(\d+)"', html)]
    assert len(seqs) == total and seqs == sorted(set(seqs))
    # past the last page: the last page, not an empty one
    assert "Page 3 of 3" in client.get("/session?id=ui-long-session&page=99").text
    # a link to an event in context lands on its page
    target = seqs[pages.TRANSCRIPT_PAGE + 5]
    link = session_url("ui-long-session", target)
    assert link.endswith(f"#seq-{target}") and f"at={target}" in link
    html = client.get(link.split("#")[0]).text
    assert "Page 2 of 3" in html and f'id="seq-{target}"' in html
    assert client.get("/session?id=ui-long-session&page=0").status_code == 400


def test_the_meaning_toggle_asks_for_a_hybrid_search(recall: Recall, data: Path) -> None:
    client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
    assert 'name="semantic"' in client.get("/search?q=EUR").text
    assert pages.search_options(pages.SearchForm(query="EUR", semantic=True)).mode == "hybrid"
    # this corpus's index holds no vectors: the page says so with the code and the next step
    page = client.get("/search?q=EUR&semantic=1")
    assert page.status_code == 409
    assert "RECALL_SEMANTIC_UNAVAILABLE" in page.text and "RECALL_SEMANTIC=1" in page.text
