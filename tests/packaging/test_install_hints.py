"""Every install hint a user can copy (README, docs, Docker files, error hints in the code) names the
distribution pyproject.toml declares, or a path to a checkout: "session-recall" on PyPI is an
unrelated project, and advice naming it installs the wrong software."""

from __future__ import annotations

import re
from pathlib import Path

from distribution import declared_distribution

ROOT = Path(__file__).resolve().parents[2]
# `pip install 'NAME[extra]'`, `pipx install NAME`, `pip install -e '.[x]'` …: the NAME or path.
INSTALL = re.compile(r"""pipx? install (?:-[-\w]+ )*['"]?([^\s'"\[`)]+)""")


def hinted_targets() -> list[tuple[str, str]]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "docker").glob("Dockerfile*")),
             *sorted(p for d in ("projections", "indexer", "streams") for p in (ROOT / d).rglob("*.py"))]
    found = []
    for path in files:
        for match in INSTALL.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), match.group(1)))
    return found


def test_every_install_hint_names_this_distribution_or_a_checkout() -> None:
    targets = hinted_targets()
    assert any(target == declared_distribution() for _, target in targets), targets
    wrong = [(where, target) for where, target in targets
             if target != declared_distribution()
             and not target.startswith((".", "/", "$", "{", "build>=", "-r"))]
    assert not wrong, f"install hints naming another distribution: {wrong}"
