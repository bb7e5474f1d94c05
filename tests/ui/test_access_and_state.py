"""Who may read the web page and what a GET may change: `recall ui` requires its access token
by default (loopback too: the port is open to every local user, the data dir is not), an
explicit --no-token for single-user machines; a GET never builds the substring index (a page
elsewhere can make the browser send one), the build is a POST with the anti-forgery token;
caller mistakes are 4xx with their code; the URL printed for any loopback address passes the
server's own Host check."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from secretcorpus import planted_secrets, secret_fragments, secret_sessions, write_sessions
from starlette.testclient import TestClient

from streams.facade import Recall
from streams.faces.ui.app import TOKEN_COOKIE, create_app
from tests.ui import corpus

LOCAL = "http://127.0.0.1"
RECALL = Path(sys.executable).with_name("recall")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus.build(tmp_path_factory.mktemp("ui-access"))


@pytest.fixture
def served(data: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """`recall ui --json` with the extra arguments parametrized in: its start-up line."""
    extra = list(getattr(request, "param", []))
    proc = subprocess.Popen([str(RECALL), "--data-dir", str(data), "ui", "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read().decode() if proc.stderr else ""
        yield orjson.loads(first)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""),
                     headers=headers or {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def test_recall_ui_requires_its_token_on_loopback_by_default(served: dict[str, Any],
                                                             data: Path) -> None:
    token = (data / "ui-token").read_text().strip()
    assert served["tokenRequired"] is True and served["url"].endswith(f"/?token={token}")
    base = f"http://127.0.0.1:{served['port']}"
    for path in ("/", "/dead-letters", "/search?q=EUR", "/static/ui.css"):
        status, _, body = _get(base + path)
        assert status == 401 and b"EUR" not in body, path
    # the printed URL: a redirect that sets an HttpOnly, SameSite=Strict cookie
    status, headers, _ = _get(served["url"])
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}={token};")
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    status, _, body = _get(base + "/", {"cookie": f"{TOKEN_COOKIE}={token}"})
    assert status == 200 and b"Sessions" in body


@pytest.mark.parametrize("served", [["--no-token"]], indirect=True)
def test_no_token_is_an_explicit_choice(served: dict[str, Any]) -> None:
    assert served["tokenRequired"] is False and "token=" not in served["url"]
    status, _, _ = _get(served["url"])
    assert status == 200


def test_no_token_off_loopback_is_refused(data: Path) -> None:
    run = subprocess.run([str(RECALL), "--data-dir", str(data), "ui", "--no-token",
                          "--host", "0.0.0.0", "--json"], capture_output=True, timeout=60)
    assert run.returncode == 2 and b"RECALL_USAGE" in run.stdout + run.stderr


@pytest.mark.parametrize("served", [["--host", "127.0.0.2"]], indirect=True)
def test_the_printed_url_of_any_loopback_address_passes_the_host_check(
        served: dict[str, Any]) -> None:
    assert served["url"].startswith("http://127.0.0.2:")
    status, headers, _ = _get(served["url"])
    assert status == 303
    token = headers["set-cookie"].split(";")[0].split("=", 1)[1]
    status, _, body = _get(f"http://127.0.0.2:{served['port']}/",
                           {"cookie": f"{TOKEN_COOKIE}={token}"})
    assert status == 200 and b"Sessions" in body


def _substring_built(data: Path) -> bool:
    with Recall.open(data) as recall:
        return recall.substring_ready()


def test_a_get_never_builds_the_substring_index_a_post_with_the_form_token_does(
        tmp_path: Path) -> None:
    data = corpus.build(tmp_path)
    with Recall.open(data) as recall:
        assert not recall.substring_ready()
        client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL,
                            follow_redirects=False)
        page = client.get("/search", params={"q": "EUR", "substring": "1"})
        assert page.status_code == 200 and 'action="/substring-index"' in page.text
        assert not recall.substring_ready() and not _substring_built(data)
        # a forged POST (no anti-forgery token) changes nothing either
        forged = client.post("/substring-index", data={"next": "/search?q=EUR&substring=1"})
        assert forged.status_code == 403 and not _substring_built(data)
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        built = client.post("/substring-index", data={"csrf": csrf,
                                                      "next": "/search?q=EUR&substring=1"})
        assert built.status_code == 303 and built.headers["location"] == \
            "/search?q=EUR&substring=1"
        assert _substring_built(data)
        # elsewhere than a search page it sends no one
        again = client.post("/substring-index", data={"csrf": csrf, "next": "https://x.example/"})
        assert again.headers["location"] == "/search"
        hits = client.get("/search", params={"q": "EUR", "substring": "1"})
        assert 'action="/substring-index"' not in hits.text and 'class="hit ' in hits.text


def test_caller_mistakes_are_4xx_with_their_code(data: Path) -> None:
    with Recall.open(data) as recall:
        client = TestClient(create_app(recall, data_dir=data), base_url=LOCAL)
        sid = corpus.DEMO_SESSIONS[0]
        own = client.get("/reference", params={"target": sid, "source": sid})
        assert own.status_code == 400 and "SESSION_REFERENCE_SELF_REFERENCE" in own.text
        long = client.get("/search", params={"q": "ab " * 18_000})
        assert long.status_code == 400 and "RECALL_QUERY_TOO_LONG" in long.text
        assert len(long.content) < 20_000  # the page does not echo the whole query back


# --- secrets: the pages show markers, never the planted secrets -----------------------------------

PLANTED = planted_secrets()
FRAGMENTS = sorted({f for p in PLANTED for f in secret_fragments(p.value)})


def _leaked(text: str) -> list[str]:
    return [f for f in FRAGMENTS if f in text]


@pytest.fixture(scope="module")
def secret_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-secrets")
    paths = write_sessions(root / "src", secret_sessions())
    # every planted secret also on a line that cannot be parsed: it is parked, never indexed
    broken = root / "src" / "broken-lines.jsonl"
    broken.write_bytes(b"".join(b'{"type": "user/message", "note": ' + orjson.dumps(p.text)
                                + b"\n" for p in PLANTED))
    with Recall.open(root / "data") as recall:
        recall.ingest([*paths, broken])
    return root / "data"


def test_the_dead_letters_page_shows_secrets_redacted_and_downloads_the_original(
        secret_data: Path) -> None:
    with Recall.open(secret_data) as recall:
        items = recall.dead_letters()
        client = TestClient(create_app(recall, data_dir=secret_data), base_url=LOCAL)
        page = client.get("/dead-letters")
        assert page.status_code == 200 and items
        assert _leaked(page.text) == [] and "[redacted:" in page.text
        numbers = [int(n) for n in re.findall(r'href="/dead-letters/raw\?n=(\d+)"', page.text)]
        assert len(numbers) == len(items)
        raw = b"".join(client.get("/dead-letters/raw", params={"n": n}).content for n in numbers)
        assert all(p.value.encode() in raw for p in PLANTED)
        one = client.get("/dead-letters/raw", params={"n": numbers[0]})
        assert one.headers["content-disposition"].startswith("attachment;")
        assert client.get("/dead-letters/raw", params={"n": len(items)}).status_code == 404


def test_no_page_shows_a_planted_secret(secret_data: Path) -> None:
    with Recall.open(secret_data) as recall:
        client = TestClient(create_app(recall, data_dir=secret_data), base_url=LOCAL)
        sids = ["leak-prompts", "leak-results", "leak-calls", "leak-compacted"]
        shown = [client.get("/").text, client.get("/search", params={"q": "redacted"}).text]
        for sid in sids:
            shown.append(client.get("/session", params={"id": sid}).text)
            shown.append(client.get("/session", params={"id": sid, "view": "surface"}).text)
            shown.append(client.get("/search", params={"q": "deploy", "session": sid}).text)
            for seq in range(3):
                shown.append(client.get("/event", params={"id": sid, "seq": seq,
                                                          "raw": "1"}).text)
        shown.append(client.get("/reference", params={"target": "clean-target",
                                                      "source": sids[:2]}).text)
        text = "\n".join(shown)
        assert "[redacted:" in text and _leaked(text) == []
