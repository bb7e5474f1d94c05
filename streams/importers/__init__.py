"""Ingest edge: importers that turn Claude Code and Codex CLI session files into native logs."""

from streams.importers.claude_code import import_claude_code
from streams.importers.codex import import_codex
from streams.importers.common import ImportedSession
from streams.importers.detect import detect_format
from streams.importers.incremental import PrefixIdentity, classify_change, prefix_identity

#: Format name (as `detect_format` returns it) → importer, for the ingest edge's registry.
IMPORTERS = {"claude-code": import_claude_code, "codex": import_codex}

__all__ = [
    "IMPORTERS",
    "ImportedSession",
    "PrefixIdentity",
    "classify_change",
    "detect_format",
    "import_claude_code",
    "import_codex",
    "prefix_identity",
]
