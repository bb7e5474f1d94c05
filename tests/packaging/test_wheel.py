"""Packaging: the built wheel, installed alone into a fresh venv, runs every entry point.

The editable install of `make` hides packaging mistakes (a subpackage or data file left out of the
wheel still imports from the source tree), so this test builds the wheel, installs it into a new
virtual environment and runs `recall` from a directory outside the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from distribution import declared_distribution

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(1200)]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(bin dir, environment) of a fresh venv holding only the wheel and its dependencies."""
    work = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALL_", "PYTHON"))}
    env["RECALL_DATA_DIR"] = str(work / "data")
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(ROOT)],
        cwd=work, env=env)
    wheel_name = declared_distribution().replace("-", "_")
    wheels = list((work / "dist").glob(f"{wheel_name}-*.whl"))
    assert len(wheels) == 1
    venv.create(work / "venv", with_pip=True)
    bin_dir = work / "venv" / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", f"{wheels[0]}[mcp]"],
        cwd=work, env=env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["RECALL_TEST_WHEEL_DIR"] = str(work / "dist")
    return bin_dir, env


def test_the_installed_packages_come_from_the_wheel_not_the_source_tree(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    code = ("import json, streams, streams.ingest.importers, streams.runtime.kafka.worker, streams.faces.mcp.server, "
            "indexer, projections, pathlib; "
            "print(json.dumps({'file': streams.__file__, 'samples': sorted(p.name for p in "
            "(pathlib.Path(streams.__file__).parent / 'samples').glob('*.jsonl'))}))")
    found = json.loads(run([str(bin_dir / "python"), "-c", code], tmp_path, env).stdout)
    assert str(bin_dir.parent) in found["file"] and str(ROOT) not in found["file"]
    assert len(found["samples"]) == 4


def test_every_entry_point_runs_from_the_installed_wheel(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    recall = str(bin_dir / "recall")
    assert "0.1.0" in run([recall, "--version"], tmp_path, env).stdout
    demo = run([recall, "demo"], tmp_path, env).stdout
    assert "Traceback" in demo and "<referenced-sessions>" in demo
    samples = run([str(bin_dir / "python"), "-c",
                   "import streams, pathlib; print(pathlib.Path(streams.__file__).parent"
                   " / 'samples')"], tmp_path, env).stdout.strip()
    report = json.loads(run([recall, "ingest", samples, "--json"], tmp_path, env).stdout)
    assert report["sessions"] == 4 and report["rejected"] == 0
    page = json.loads(run([recall, "search", "Traceback", "--json"], tmp_path, env).stdout)
    assert page["items"][0]["bestMatch"]["sessionId"] == "ci-billing-2025-11-24"
    for command in ("mcp", "worker", "ingest", "search", "reference"):
        assert "Usage:" in run([recall, command, "--help"], tmp_path, env).stdout


def test_the_missing_extra_hint_installs_this_project(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """The hint's `pip install 'NAME[ui]'`, run as printed (PyPI, plus the built wheel as a local
    index), must add the extra to this project: a NAME that PyPI gives to another project would
    replace `recall` with that project's newer release. Runs last: it changes the venv."""
    bin_dir, env = installed
    recall = str(bin_dir / "recall")
    failed = subprocess.run([recall, "ui", "--json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert failed.returncode == 1 and "RECALL_MISSING_EXTRA" in failed.stdout + failed.stderr
    hint = re.search(r"pip install '([A-Za-z0-9._-]+)\[ui\]'", failed.stdout + failed.stderr)
    assert hint, failed.stdout + failed.stderr
    assert hint.group(1) == declared_distribution()
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--find-links",
         env["RECALL_TEST_WHEEL_DIR"], f"{hint.group(1)}[ui]"], cwd=tmp_path, env=env)
    assert "0.1.0" in run([recall, "--version"], tmp_path, env).stdout
    assert "Usage:" in run([recall, "ui", "--help"], tmp_path, env).stdout
