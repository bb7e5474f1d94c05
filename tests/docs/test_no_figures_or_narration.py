"""Docs say what is, not what happened: the README and docs/ narrate no earlier runs or sessions,
the only figures of measurements are in bench/RESULTS.md (written by `make bench`), and the
comments and docstrings of the packages say why without quoting measured figures."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("projections", "indexer", "streams")

#: Phrases that narrate a run or a session rather than describe the software.
NARRATION = re.compile(
    r"\b(this stop|the stops? before|at this stop|a turn ago|in the (latest|last|previous|earlier) "
    r"runs?|in the run before|two runs before|the day before|yesterday"
    r"|(ran|measured|machine|slower|faster)\b[^.\n]*\btoday)\b", re.I)
#: A measured figure: a rate, a speed-up, a percentile, or a number a "measured" vouches for.
#: (Configured durations and sizes are settings, not measurements.)
FIGURE = re.compile(
    r"\d[\d.,]*k?\s?(events|documents|records|rows|fetches|lines)/s\b"
    r"|\d[\d.,]*\s?(x|×)\s(faster|slower)|\bp(50|99)\b[^;\n]*?\d\s?(µs|us|ms)\b"
    r"|\bmeasured\b[^\n]*?\d\s?(µs|us|ms|s|%|MB|GB)(?!\w)", re.I)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_narrate_no_runs(doc: Path) -> None:
    found = [line.strip() for line in doc.read_text(encoding="utf-8").splitlines()
             if NARRATION.search(line)]
    assert not found, f"{doc.name} narrates runs or sessions: {found}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_quote_no_measured_figures(doc: Path) -> None:
    prose = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    found = [line.strip() for line in prose.splitlines() if FIGURE.search(line)]
    assert not found, f"{doc.name} quotes measured figures (they belong in bench/RESULTS.md): {found}"


def _prose(source: str) -> list[tuple[int, str]]:
    """The comments and string literals of a module (docstrings among them), with line numbers."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING
                                            and tok.string.lstrip("rbuRBU").startswith('"""')):
            out += [(tok.start[0] + i, line) for i, line in enumerate(tok.string.splitlines())]
    return out


def test_comments_and_docstrings_quote_no_measured_figures() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in _prose(path.read_text(encoding="utf-8")):
                if FIGURE.search(line) or NARRATION.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "measured figures or narration in comments/docstrings:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for() -> None:
    assert FIGURE.search("search p50 3.5 ms against 4.0 ms")
    assert FIGURE.search("the pipeline ran 3.1–4.7× faster")
    assert FIGURE.search("29.9k documents/s")
    assert FIGURE.search("(measured: 21.6 -> 16.3 us per event on 100k events)")
    assert not FIGURE.search("SEGMENT_LINGER_MS = 5 (how long a line may wait 5 ms)")
    assert NARRATION.search("0.050 the stop before")
    assert NARRATION.search("3.63 ms in the run before")
    assert NARRATION.search("this machine ran 1.2–1.6× slower today")
    assert not NARRATION.search("the fold stops before the cap; the run before them commits")
    assert not NARRATION.search("faust's own topics (none today) follow ours")
