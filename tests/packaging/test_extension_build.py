"""Building the package: no setuptools "experimental" warning, no `build/` dir left in the checkout,
and a rebuild after a source change ships the new C extension even beside a stale `build/` dir
(with a `.so` that looks newer than the change)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


def _build(src: Path, out: Path) -> tuple[bytes, str]:
    """(the wheel's compiled extension, what the build printed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALL_", "PYTHON"))}
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out),
                           str(src)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist()
                   if n.startswith("indexer/_matchcount") and n.endswith(".so")]
        return archive.read(name), done.stdout + done.stderr


def test_a_rebuild_after_a_source_change_ships_the_new_extension(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "tests", "bench", "docs", "*.so",
        "__pycache__", ".*_cache", ".hypothesis"))
    first, printed = _build(src, tmp_path / "first")
    assert "experimental" not in printed
    assert not (src / "build").exists(), "the build left a build/ dir in the checkout"
    # A stale build/ as an older setuptools layout or a manual `setup.py build` leaves it.
    stale = src / "build" / "lib.linux-x86_64-cpython-311" / "indexer" / "_matchcount.so"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(first)
    future = time.time() + 3600
    os.utime(stale, (future, future))
    marker = f"rebuilt-{uuid.uuid4().hex}"
    with (src / "indexer" / "_matchcount.c").open("a") as source:
        source.write(f'\nconst char recall_build_marker[] = "{marker}";\n')
    extension, _ = _build(src, tmp_path / "second")
    assert marker.encode() in extension
