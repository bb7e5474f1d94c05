"""`recall ui` in a real headless Chromium: the pages people use, followed link by link."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from streams.facade import Recall
from tests.ui import corpus

pytestmark = pytest.mark.browser


def _wait(driver: Any, condition: Any) -> Any:
    return WebDriverWait(driver, 10).until(condition)


def _pwned(driver: Any) -> Any:
    return driver.execute_script("return window.__pwned === undefined ? null : window.__pwned")


def test_sessions_page_lists_the_demo_sessions_newest_first(page: Any) -> None:
    driver = page.get("/")
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.session-row")
    ids = [r.get_attribute("data-session") for r in rows]
    for session in corpus.DEMO_SESSIONS:
        assert session in ids
    assert ids[0] == corpus.CJK_SESSION  # the newest activity first
    billing = next(r for r in rows if r.get_attribute("data-session") == "ci-billing-2025-11-24")
    assert "Fix the failing CI job on main" in billing.text and "dsh" in billing.text
    assert "39" in billing.text  # its event count
    page.shot("sessions")
    # filters: the folder and everything below it
    driver = page.get("/?cwd=" + quote("/home/dev/搜索"))
    assert [r.get_attribute("data-session") for r in
            driver.find_elements(By.CSS_SELECTOR, "tr.session-row")] == [corpus.CJK_SESSION]


def test_traceback_hit_is_shadowed_and_dimmed_in_its_transcript(page: Any) -> None:
    driver = page.get("/search?q=Traceback")
    hit = driver.find_element(By.CSS_SELECTOR, "li.hit[data-session='ci-billing-2025-11-24']")
    assert hit.get_attribute("data-seq") == "7"
    assert hit.find_element(By.CSS_SELECTOR, ".badge").text == "shadowed"
    marks = hit.find_elements(By.CSS_SELECTOR, ".snippet mark")
    assert [m.text for m in marks] == ["Traceback"]
    page.shot("search")
    hit.find_element(By.CSS_SELECTOR, "a.in-context").click()
    entry = _wait(driver, lambda d: d.find_element(By.ID, "seq-7"))
    assert driver.current_url.endswith("#seq-7")
    assert "surface-shadowed" in entry.get_attribute("class")
    assert float(entry.value_of_css_property("opacity")) < 1
    assert "Traceback (most recent call last)" in entry.text  # its output opened for the link
    replaced = entry.find_element(By.CSS_SELECTOR, ".replaced-by")
    assert replaced.text == "replaced by seq 28 — prune"
    page.shot("session")
    replaced.find_element(By.TAG_NAME, "a").click()
    _wait(driver, lambda d: d.current_url.endswith("#seq-28"))
    replacement = driver.find_element(By.ID, "seq-28")
    assert "boundary" in replacement.get_attribute("class")
    assert "replaces seq 7" in replacement.text
    # the compaction that later replaced both is marked as a boundary with its summary
    compaction = driver.find_element(By.ID, "seq-31")
    assert "compaction: replaces seqs 3–24" in compaction.text
    assert "Summary of the earlier conversation" in compaction.text


def test_surface_toggle_shows_exactly_what_the_model_sees(page: Any) -> None:
    driver = page.get("/session?id=ci-billing")
    driver.find_element(By.ID, "toggle-view").click()
    _wait(driver, lambda d: "view=surface" in d.current_url)
    seqs = [int(e.get_attribute("data-seq"))
            for e in driver.find_elements(By.CSS_SELECTOR, "article.entry")]
    with Recall.open(_data_dir(page)) as recall:
        expected = [e["seq"] for e in recall.read_surface("ci-billing-2025-11-24")["events"]]
    assert seqs == expected and 7 not in seqs and 31 in seqs
    assert not driver.find_elements(By.CSS_SELECTOR, ".surface-shadowed")


def test_cjk_search_highlights_the_phrase(page: Any) -> None:
    driver = page.get("/search?q=" + quote("搜索"))
    hits = driver.find_elements(By.CSS_SELECTOR, "li.hit")
    assert [h.get_attribute("data-session") for h in hits] == [corpus.CJK_SESSION]
    assert {m.text for m in hits[0].find_elements(By.CSS_SELECTOR, "mark")} == {"搜索"}
    hits[0].find_element(By.CSS_SELECTOR, "a.event-link").click()
    _wait(driver, lambda d: "/event" in d.current_url)
    assert corpus.CJK_TEXT in driver.find_element(By.CSS_SELECTOR, "article.target").text
    page.shot("search-cjk")


def test_search_within_a_session_with_filters_and_a_stale_cursor(page: Any) -> None:
    driver = page.get("/search?session=ci-billing&q=EUR&surface=current")
    hits = driver.find_elements(By.CSS_SELECTOR, "li.hit")
    assert hits and all(h.find_element(By.CSS_SELECTOR, ".badge").text == "current"
                        for h in hits)
    assert all(h.find_elements(By.CSS_SELECTOR, "mark") for h in hits)
    driver = page.get("/search?q=EUR&cursor=not-a-cursor")
    assert "restarted from the first page" in driver.find_element(By.CSS_SELECTOR,
                                                                   ".notice").text
    assert driver.find_elements(By.CSS_SELECTOR, "li.hit")


def _data_dir(page: Any) -> Path:
    return Path(page.data_dir)


def test_reference_preview_equals_the_dry_run(page: Any, ui_data: Path) -> None:
    driver = page.get("/reference")
    driver.find_element(By.ID, "source-1").send_keys("ci-billing-2025-11-24")
    driver.find_element(By.ID, "label-1").send_keys("CI fix")
    driver.find_element(By.ID, "source-2").send_keys("docs-quickstart")
    driver.find_element(By.ID, "target").send_keys("ci-followup-2025-12-01")
    driver.find_element(By.ID, "message").send_keys("same failure?")
    driver.find_element(By.CSS_SELECTOR, "form.reference-form button").click()
    text = _wait(driver, lambda d: d.find_element(By.ID, "context-text")).get_attribute("value")
    recall_bin = Path(sys.executable).with_name("recall")
    cli = subprocess.run([str(recall_bin), "--data-dir", str(ui_data), "reference", "--target",
                          "ci-followup-2025-12-01", "--message", "same failure?", "--source",
                          "ci-billing-2025-11-24=CI fix", "--source", "docs-quickstart",
                          "--dry-run", "--json"], capture_output=True, check=True)
    expected = orjson.loads(cli.stdout)["additionalContext"]["content"][0]["text"]
    assert text == expected
    with Recall.open(ui_data) as recall:
        api = recall.prepare_reference("ci-followup-2025-12-01", "same failure?", references=[
            {"sessionId": "ci-billing-2025-11-24", "label": "CI fix"},
            {"sessionId": "docs-quickstart"}], dry_run=True)
    assert text == api["additionalContext"]["content"][0]["text"]
    budget = driver.find_elements(By.CSS_SELECTOR, "table.budget tbody tr")
    assert len(budget) == 2 and "/ 65536" in budget[0].text and "no" in budget[0].text
    # recall writes ci-followup: the append button is there
    assert driver.find_elements(By.ID, "append")
    driver.find_element(By.ID, "copy-context").click()
    _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".copied").text)
    page.shot("reference")
    # an agent's session (not written by recall): no append, a note instead
    driver = page.get("/reference?source=ci-followup&target=ci-billing")
    assert not driver.find_elements(By.ID, "append")
    assert "recall appends only to sessions it writes" in driver.find_element(
        By.ID, "no-append").text


def test_hostile_text_renders_inert(page: Any) -> None:
    for path in ("/", f"/session?id={corpus.HOSTILE_SESSION}", "/search?q=window",
                 f"/event?id={corpus.HOSTILE_SESSION}&seq=2&raw=1",
                 f"/reference?source={corpus.HOSTILE_SESSION}&target=ci-followup"):
        driver = page.get(path)
        assert _pwned(driver) is None, path
        main = driver.find_element(By.ID, "main")
        assert not main.find_elements(By.CSS_SELECTOR, "img, svg, script, b"), path
    driver = page.get(f"/session?id={corpus.HOSTILE_SESSION}")
    body = driver.find_element(By.CSS_SELECTOR, ".transcript").text
    assert "<script>window.__pwned = 1</script>" in body
    assert '"><img src=x onerror="window.__pwned = 2">' in body
    assert "<b>bold markup</b> and &amp; entity" in body
    assert "\\u202egnp.exe\\u202c" in body and "\u202e" not in body  # the override is shown
    title = driver.find_element(By.CSS_SELECTOR, "h1.session-title").text
    assert title.startswith("<script>") and "\\u202e" in title
    assert driver.find_element(By.CSS_SELECTOR, "dl.meta").text.count('<evil> "dir"') == 1
    page.shot("hostile")


def test_event_page_shows_neighbours_trace_and_raw_json(page: Any) -> None:
    driver = page.get("/event?id=ci-billing-2025-11-24&seq=7")
    entries = driver.find_elements(By.CSS_SELECTOR, "article.entry")
    assert [e.get_attribute("data-seq") for e in entries] == [str(s) for s in range(4, 11)]
    assert driver.find_element(By.CSS_SELECTOR, "article.target").get_attribute(
        "data-seq") == "7"
    assert "seq 28" in driver.find_element(By.CSS_SELECTOR, "section.trace").text
    raw = driver.find_element(By.CSS_SELECTOR, "details.raw")
    assert raw.get_attribute("open") is None
    raw.find_element(By.TAG_NAME, "summary").click()
    shown = orjson.loads(raw.find_element(By.CSS_SELECTOR, "pre.json").text)
    assert shown["seq"] == 7 and shown["type"] == "tool/result"
    page.shot("event")


def test_dead_letters_show_the_reason_and_original_bytes(page: Any) -> None:
    driver = page.get("/dead-letters")
    parked = driver.find_elements(By.CSS_SELECTOR, "li.parked")
    assert parked and "broken.jsonl" in parked[0].text
    parked[0].find_element(By.TAG_NAME, "summary").click()
    assert "<not json> \\xff" in parked[0].find_element(By.CSS_SELECTOR, "pre").text
    page.shot("dead-letters")


def test_keyboard_phone_width_and_dark_mode(page: Any) -> None:
    driver = page.get("/")
    driver.find_element(By.TAG_NAME, "body").send_keys("/")
    assert driver.switch_to.active_element.get_attribute("id") == "quick-q"
    driver.switch_to.active_element.send_keys("Traceback" + Keys.ENTER)
    _wait(driver, lambda d: "/search" in d.current_url)
    link = driver.find_element(By.CSS_SELECTOR, "li.hit a.in-context")
    link.send_keys(Keys.ENTER)  # links are reachable and followable by keyboard
    _wait(driver, lambda d: "#seq-7" in d.current_url)
    driver.set_window_size(390, 844)
    for path in ("/", "/session?id=ci-billing", "/search?q=EUR"):
        driver = page.get(path)
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, path
    page.shot("phone")
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark"}]})
    driver.set_window_size(1280, 900)
    driver = page.get("/session?id=ci-billing")
    background = driver.execute_script(
        "return getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 20, 23)"
    page.shot("dark")
