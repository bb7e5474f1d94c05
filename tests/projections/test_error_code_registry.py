"""One registry of error codes (projections/errors.py `CODES`): every code-shaped literal of the
sources is registered, every registered code is in the code table of docs/errors.md, and every
code that table names in full is registered."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from projections.errors import CODES
from streams.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: (a name ending in `_` is a prefix, such as an environment variable family's)
CODE = re.compile(r"(INGEST|RECALL|SESSION_QUERY|SESSION_REFERENCE|STREAM)_[A-Z0-9_]*[A-Z0-9]\Z")
#: Environment variables share the RECALL_ prefix (docs/settings.md lists them).
ENV = ({f"RECALL_{name.upper()}" for name in Settings.model_fields}
       | {"RECALL_MCP_SESSION", "RECALL_MCP_CWD", "RECALL_MCP_MAX_SEARCH_RESULTS",
          "RECALL_MCP_SEARCH_TIMEOUT_MS"}
       | set(re.findall(r"`(RECALL_[A-Z0-9_]+)`", (ROOT / "docs" / "settings.md").read_text())))


def literals() -> dict[str, str]:
    """Code-shaped string literals of projections, indexer and streams → a file holding one."""
    found: dict[str, str] = {}
    for package in ("projections", "indexer", "streams"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and CODE.match(node.value) and node.value not in ENV:
                    found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def table_rows() -> list[str]:
    return [line for line in (ROOT / "docs" / "errors.md").read_text().splitlines()
            if line.startswith("| `")]


def documented() -> set[str]:
    """The codes of the table: named in full, or by suffix in a `PREFIX_*` row."""
    rows = table_rows()
    names = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", "\n".join(rows)))
    for prefix in ("SESSION_QUERY", "SESSION_REFERENCE"):
        for row in rows:
            if row.startswith(f"| `{prefix}_*`"):
                names |= {f"{prefix}_{s}" for s in re.findall(r"`([A-Z][A-Z0-9_]+)`", row)}
    return names


def test_every_code_in_the_sources_is_registered() -> None:
    unregistered = {code: path for code, path in literals().items() if code not in CODES}
    assert not unregistered, f"add these codes to projections/errors.py: {unregistered}"


def test_every_registered_code_is_in_the_docs_table() -> None:
    missing = sorted(CODES - documented())
    assert not missing, f"codes missing from docs/errors.md's code table: {missing}"


def test_every_code_the_table_names_in_full_is_registered() -> None:
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", "\n".join(table_rows())))
    unknown = sorted(c for c in named if CODE.match(c) and c not in ENV and c not in CODES)
    assert not unknown, f"docs/errors.md names codes no error carries: {unknown}"
