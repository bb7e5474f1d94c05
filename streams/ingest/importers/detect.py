"""Ingest edge: tell a file's format (native DSH or one of the registry's) from its name and first
bytes; each importer recognises its own format, this module only asks them in order."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePath

from streams.ingest.importers.formats import REGISTRY
from streams.ingest.importers.sniffing import head_lines, plain_prefix

Format = str  # "dsh" or a registry name


def is_native(head: bytes) -> bool:
    """A DSH log starts with its session header."""
    for value in head_lines(head, limit=1):
        return isinstance(value, dict) and value.get("type") == "session" and "version" in value
    return False


def detect_format(path: str | PurePath, first_bytes: bytes) -> Format | None:
    """"dsh", a registry format name, or None when neither the content nor the name tells."""
    head = plain_prefix(first_bytes)
    where = PurePath(path)
    if is_native(head):
        return "dsh"
    for spec in REGISTRY:
        if spec.sniff(where, head):
            return spec.name
    for spec in REGISTRY:
        if spec.claims(where):
            return spec.name
    return None


def claims_log_name(path: PurePath) -> bool:
    """A file a directory walk should pick up beyond `*.jsonl[.zst]`: one some agent writes."""
    return any(spec.claims(path) for spec in REGISTRY)


def default_locations(environ: Mapping[str, str] | None = None,
                      home: Path | None = None) -> dict[Format, list[Path]]:
    """Where each supported agent keeps its logs on this machine (existing or not), by format;
    environment overrides (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `COPILOT_HOME`, `XDG_DATA_HOME`)
    are honoured. Formats whose logs live inside each project (Aider) have none."""
    environ = os.environ if environ is None else environ
    found: dict[Format, list[Path]] = {}
    for spec in REGISTRY:
        found[spec.name] = [loc.resolve(environ, home) for loc in spec.locations]
    return found
