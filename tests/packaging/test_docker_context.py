"""The Docker build: the compose file's context sends only what the Dockerfile copies (no 388 MB
`.venv`, no `.git`, no stale in-tree `.so`), and the image's wheel is built with the match-count C
extension (a compiler and SQLite's headers in the build stage, and a check that fails the build
without it)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def _context() -> Path:
    compose = (DOCKER / "compose.yaml").read_text()
    contexts = set(re.findall(r"context:\s*([^,}\s]+)", compose))
    assert len(contexts) == 1, contexts
    return (DOCKER / contexts.pop()).resolve()


def _ignored(patterns: list[str], path: str) -> bool:
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p.removeprefix("**/"))
               or path.startswith(p.rstrip("/") + "/") for p in patterns)


def test_the_build_context_leaves_out_everything_the_image_does_not_copy() -> None:
    context = _context()
    ignore = context / ".dockerignore"
    assert ignore.is_file(), f"no .dockerignore in the build context {context}"
    patterns = [line.strip() for line in ignore.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for heavy in (".venv", ".git", "build", "dist", "tests", "bench",
                  "indexer/_matchcount.cpython-311-x86_64-linux-gnu.so",
                  "streams/__pycache__"):
        assert _ignored(patterns, heavy), heavy
    copied = re.findall(r"^COPY (?!--from)(.+?) \S+$", (DOCKER / "Dockerfile").read_text(), re.M)
    sources = [name for line in copied for name in line.split()]
    assert {"pyproject.toml", "README.md", "projections", "indexer", "streams"} <= set(sources)
    for name in sources:
        assert (context / name).exists() and not _ignored(patterns, name), name


def test_the_image_wheel_is_built_with_the_c_extension() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    build_stage = dockerfile.split("\nFROM ")[1]
    assert "gcc" in build_stage and "libsqlite3-dev" in build_stage
    assert "indexer/_matchcount" in build_stage and "sys.exit" in build_stage
