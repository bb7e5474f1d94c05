"""Ingest edge: importers that turn other agents' session files into native logs (Claude Code,
Codex CLI, Gemini CLI, GitHub Copilot CLI, OpenCode, Aider, Pi, Continue, Roo Code, Kimi CLI,
OpenHands, Crush), and the registry that lists them (formats.py)."""

from streams.ingest.importers.claude_code import import_claude_code
from streams.ingest.importers.codex import import_codex
from streams.ingest.importers.common import ImportedSession
from streams.ingest.importers.detect import claims_log_name, default_locations, detect_format
from streams.ingest.importers.formats import FORMAT_NAMES, IMPORTERS, REGISTRY
from streams.ingest.importers.incremental import PrefixIdentity, classify_change, prefix_identity
from streams.ingest.importers.registry import ImporterSpec, Location

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
