"""Docs: the README is short, every `recall` command it shows runs and prints what it shows (in a
fresh data dir named by RECALL_DATA_DIR, as the tour says), its Python example runs as written
(doctest), and every relative link in the README and docs/ points at a file and heading that
exist."""

from __future__ import annotations

import doctest
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from datadirs import recall_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 250
#: Codes whose exit status is 2: the invocation was not understood (docs/errors.md).
USAGE_CODES = {"RECALL_USAGE", "RECALL_CONFIG_INVALID"}


class Shown(NamedTuple):
    command: str
    output: list[str]


def _fences(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    return re.findall(r"^```([^\n`]*)\n(.*?)^```", text, re.S | re.M)


def shown_commands(text: str) -> list[Shown]:
    """Every `recall …` a code block shows, in order, with the output shown under it: in a
    console block a command is a line starting with `$ `, and its output runs to the next one;
    elsewhere a line starting with `recall ` is a command shown without output."""
    shown: list[Shown] = []
    for info, body in _fences(text):
        if info.strip() == "python":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                shown.append(Shown(line[2:].strip(), []))
            elif line.startswith("recall "):
                shown.append(Shown(line.split("  #")[0].strip(), []))
            elif shown and info.strip() == "console" and line.strip():
                shown[-1].output.append(line)
    return shown


def _normal(line: str) -> str:
    return " ".join(line.split())


def _pattern(expected: str) -> re.Pattern[str]:
    """An output line as shown; `…` stands for text left out."""
    return re.compile(".*".join(re.escape(part) for part in _normal(expected).split("…")))


def unmatched(expected: list[str], actual: list[str]) -> list[str]:
    """The shown lines not found, in order, among the actual ones (a line `…` is a gap)."""
    lines = [_normal(line) for line in actual]
    at = 0
    for want in expected:
        if want.strip() == "…":
            continue
        pattern = _pattern(want)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return [want]
        at += 1
    return []


def expected_status(output: list[str]) -> int:
    first = re.match(r"error ([A-Z][A-Z0-9_]+):", output[0]) if output else None
    if first is None:
        return 0
    return 2 if first.group(1) in USAGE_CODES else 1


def test_the_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES})"


def test_the_readme_shows_the_two_setup_commands_first() -> None:
    first_block = _fences(README.read_text(encoding="utf-8"))[0][1]
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"],
                                                                       ["make", "test"]]


def test_the_shown_output_is_compared_line_by_line() -> None:
    actual = ["1. ci-billing  — title", "   best   match: seq 7", "more: --cursor abc"]
    assert unmatched(["1. ci-billing — title", "…", "more: --cursor …"], actual) == []
    assert unmatched(["best match: seq 8"], actual) == ["best match: seq 8"]
    # in order only
    assert unmatched(["more: --cursor …", "1. ci-billing — title"], actual) != []
    assert expected_status(["error SESSION_QUERY_EVENT_NOT_FOUND: gone"]) == 1
    assert expected_status(["error RECALL_USAGE: no such option"]) == 2
    assert expected_status(["session x"]) == 0


def test_every_recall_command_in_the_readme_runs_as_shown(tmp_path: Path) -> None:
    shown = shown_commands(README.read_text(encoding="utf-8"))
    assert shown and shown[0].command.startswith("recall ingest"), \
        "the tour starts by ingesting the samples"
    assert sum(1 for s in shown if s.output) >= 5, "the tour shows the output of its commands"
    env = recall_env(RECALL_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path / "home"),
                     XDG_STATE_HOME=str(tmp_path / "state"))
    for command, output in shown:
        argv = shlex.split(command)
        assert argv[0] == "recall", command
        done = subprocess.run([sys.executable, "-m", "streams", *argv[1:]], capture_output=True,
                              env=env, cwd=ROOT, timeout=120)
        actual = done.stdout.decode().splitlines() + done.stderr.decode().splitlines()
        assert done.returncode == expected_status(output), (command, done.returncode, actual)
        missing = unmatched(output, actual)
        assert not missing, f"`{command}` no longer prints {missing[0]!r}; it printed:\n" + \
            "\n".join(actual)


def _python_blocks() -> list[str]:
    return [body for info, body in _fences(README.read_text(encoding="utf-8"))
            if info.strip() == "python" and body.lstrip().startswith(">>>")]


def test_the_readme_has_a_runnable_python_example() -> None:
    assert _python_blocks(), "the README's Python section lost its doctest"


@pytest.mark.parametrize("block", _python_blocks())
def test_readme_python_example_runs_as_written(block: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    parser = doctest.DocTestParser()
    test = parser.get_doctest(block, {}, "README.md", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_point_at_files_and_headings_that_exist(doc: Path) -> None:
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)  # a link written inside code is an example
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (anchor and path.suffix == ".md"
                                 and anchor not in _anchors(path)):
            broken.append(target)
    assert not broken, f"{doc.name}: links to nothing: {broken}"
