"""`make demo` from a fresh clone installs the package alone: none of the test, bench, mcp or ui
extras (linters, brokers, a browser driver) that a demo never runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_installs_only_the_package(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name in ("pyproject.toml", "setup.py", "indexer/_matchcount.c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    planned = subprocess.run(["make", "-n", "demo"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    installs = [line for line in planned.splitlines()
                if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("[" not in line for line in installs), installs
    assert planned.rstrip().endswith("recall demo")
