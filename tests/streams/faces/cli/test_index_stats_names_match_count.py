"""`recall index stats` says which match-count implementation the searches run: the compiled C
extension, or the Python fallback a build without a C compiler leaves (said, not silent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from datadirs import SAMPLES

from indexer import matchcount
from streams.faces.cli.main import main


def _stats(data: Path, *extra: str) -> str:
    result = CliRunner().invoke(main, ["--data-dir", str(data), "index", "stats", *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    assert CliRunner().invoke(main, ["--data-dir", str(data), "ingest", str(SAMPLES)]).exit_code == 0
    return data


def test_stats_name_the_implementation_that_runs(data: Path) -> None:
    expected = "compiled" if matchcount.compiled_path() is not None else "python"
    rows = json.loads(_stats(data, "--json"))
    assert {row["matchCount"] for row in rows} == {expected}
    assert ("compiled C extension" if expected == "compiled" else "Python fallback") \
        in _stats(data)


def test_without_the_extension_stats_say_python_fallback_and_how_to_build_it(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matchcount, "_COMPILED", None)
    monkeypatch.setattr(matchcount, "_registered", "python")
    rows = json.loads(_stats(data, "--json"))
    assert {row["matchCount"] for row in rows} == {"python"}
    out = _stats(data)
    assert "match count: Python fallback" in out and "C compiler" in out
