"""Every stable code the code base can emit is in the code table of docs/errors.md, and every
setting in the table of docs/settings.md. Codes are found by scanning the sources for string
literals shaped like codes, so a new code cannot ship undocumented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from streams.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"(INGEST|RECALL|SESSION_QUERY|SESSION_REFERENCE|STREAM)_[A-Z0-9_]+\Z")
#: Environment variables share the RECALL_ prefix; they are documented in the settings table.
ENV = ({f"RECALL_{name.upper()}" for name in Settings.model_fields}
       | {"RECALL_MCP_SESSION", "RECALL_MCP_CWD", "RECALL_MCP_MAX_SEARCH_RESULTS",
          "RECALL_MCP_SEARCH_TIMEOUT_MS"})


def emitted_codes() -> set[str]:
    found = {"INVALID_ARGS"}
    for package in ("projections", "indexer", "streams"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and CODE.match(node.value) and node.value not in ENV:
                    found.add(node.value)
    return found


def documented(readme: str) -> set[str]:
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    text = "\n".join(rows)
    names = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))
    # a `SESSION_QUERY_*` row lists its members by suffix
    for prefix in ("SESSION_QUERY", "SESSION_REFERENCE"):
        for row in rows:
            if row.startswith(f"| `{prefix}_*`"):
                names |= {f"{prefix}_{s}" for s in re.findall(r"`([A-Z][A-Z0-9_]+)`", row)}
    return names


def test_every_emitted_code_is_documented() -> None:
    table = (ROOT / "docs" / "errors.md").read_text()
    missing = sorted(emitted_codes() - documented(table))
    assert not missing, f"codes missing from docs/errors.md's code table: {missing}"
    assert "`INGEST_UNSUPPORTED_FORMAT`" in table


def test_every_setting_is_documented() -> None:
    table = (ROOT / "docs" / "settings.md").read_text()
    missing = sorted(name for name in ENV if f"`{name}`" not in table)
    assert not missing, f"settings missing from docs/settings.md: {missing}"
