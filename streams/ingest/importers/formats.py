"""Ingest edge: the list of supported foreign formats; adding one is a module plus a line here."""

from __future__ import annotations

from streams.ingest.importers import (
    aider,
    claude_code,
    codex,
    continue_dev,
    copilot_cli,
    copilot_legacy,
    crush,
    gemini_cli,
    kimi_cli,
    opencode,
    openhands,
    pi,
    roo_code,
)
from streams.ingest.importers.registry import ImporterSpec

#: In detection order: the most specific recognisers first, Claude Code's permissive one last.
REGISTRY: tuple[ImporterSpec, ...] = (
    codex.SPEC,
    copilot_cli.SPEC,
    copilot_legacy.SPEC,
    gemini_cli.JSONL_SPEC,
    gemini_cli.SPEC,
    opencode.SPEC,
    pi.SPEC,
    continue_dev.SPEC,
    roo_code.SPEC,
    roo_code.API_SPEC,
    kimi_cli.SPEC,
    openhands.SPEC,
    crush.SPEC,
    aider.SPEC,
    claude_code.SPEC,
)

#: Format name → spec (callable as an importer), for the ingest edge and `--format`.
IMPORTERS: dict[str, ImporterSpec] = {spec.name: spec for spec in REGISTRY}
FORMAT_NAMES: tuple[str, ...] = tuple(IMPORTERS)
