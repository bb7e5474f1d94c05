"""Packaging: print pip constraints pinning every declared dependency to its lower bound.

`make lowest` installs with these constraints and runs the suite, so a `>=` in pyproject.toml is a
version that was tested, not a guess.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*[^;]*?>=\s*([0-9][^,;\s]*)")


def floors(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    pins = []
    for spec in specs:
        found = FLOOR.match(spec)
        if found:
            pins.append(f"{found.group(1)}=={found.group(2)}")
    return pins


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    print("\n".join(floors(root / "pyproject.toml", sys.argv[1:])))
