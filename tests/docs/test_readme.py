"""Docs: the README's Python examples run as written (doctest), from a directory that is not
the checkout, so they use only the installed package."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if b.lstrip().startswith(">>>")]


def test_the_readme_has_a_runnable_python_example() -> None:
    assert _python_blocks(), "the README's Python API section lost its doctest"


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
