"""`make demo` from a fresh clone installs the package alone: none of the test, bench, mcp or ui
extras (linters, brokers, a browser driver) that a demo never runs."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_installs_only_the_package(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name in ("pyproject.toml", "setup.py", "indexer/_matchcount.c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    # Run under `make test`, a child make would print "Entering/Leaving directory" lines.
    planned = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    installs = [line for line in planned.splitlines()
                if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("[" not in line for line in installs), installs
    assert planned.rstrip().endswith("recall demo")


@pytest.mark.packaging
@pytest.mark.timeout(600)
def test_the_editable_install_make_runs_prints_nothing(tmp_path: Path) -> None:
    """`pip -q` does not reach the build backend: the install line make runs must keep
    setuptools' notices (the ext-modules "experimental" table, the flat-layout editable notice)
    off the terminal itself."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "tests", "bench", "docs", "*.so",
        "__pycache__", ".*_cache", ".hypothesis"))
    planned = subprocess.run(["make", "-n", "demo"], cwd=src, capture_output=True, text=True,
                             timeout=60, check=True).stdout
    (line,) = [ln for ln in planned.splitlines() if "pip install -q -e ." in ln]
    words = shlex.split(line)
    env = dict(os.environ)
    while "=" in words[0] and not words[0].startswith(("-", "/", ".")):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    # as `make` does: a current pip shows the build backend's warnings
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True,
                   capture_output=True, timeout=300)
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-e", "."],
                          cwd=src, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "experimental" not in printed and "Editable installation" not in printed, printed
