"""Ingest edge: importers that turn other agents' session files into native logs (Claude Code,
Codex CLI, Gemini CLI, GitHub Copilot CLI, OpenCode, Aider), and the registry that lists them."""

from streams.importers.claude_code import import_claude_code
from streams.importers.codex import import_codex
from streams.importers.common import ImportedSession
from streams.importers.detect import claims_log_name, default_locations, detect_format
from streams.importers.formats import FORMAT_NAMES, IMPORTERS, REGISTRY
from streams.importers.incremental import PrefixIdentity, classify_change, prefix_identity
from streams.importers.registry import ImporterSpec, Location

__all__ = [
    "FORMAT_NAMES",
    "IMPORTERS",
    "REGISTRY",
    "ImportedSession",
    "ImporterSpec",
    "Location",
    "PrefixIdentity",
    "claims_log_name",
    "classify_change",
    "default_locations",
    "detect_format",
    "import_claude_code",
    "import_codex",
    "prefix_identity",
]
