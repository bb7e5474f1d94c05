"""Ingest edge: tell a file's format (native DSH or one of the registry's) from its name and first
bytes; each importer recognises its own format, this module only asks them in order."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePath

from streams.ingest.importers.formats import FORMAT_NAMES, REGISTRY
from streams.ingest.importers.pi import is_pi_header
from streams.ingest.importers.sniffing import (
    document_head,
    head_lines,
    is_record_stream,
    plain_prefix,
)

Format = str  # "dsh" or a registry name

#: Files a directory walk reads the first bytes of when their name alone does not say: agents
#: write JSON documents and record streams under names of their own (Gemini CLI's exports,
#: Copilot's legacy history), so the content decides. Other files are never opened by a walk.
SNIFFED_SUFFIXES = (".json", ".json.zst", ".ndjson", ".ndjson.zst")
#: How much of a file the walk reads: every recogniser decides on the first few KiB.
HEAD_BYTES = 8192
#: Keys that make a JSON file look like an agent's session log when no recogniser takes it.
LOG_KEYS = (b'"sessionId":', b'"session_id":', b'"messages":', b'"chatMessages":',
            b'"conversation":', b'"transcript":', b'"role":', b'"parentUuid":')


def is_native(head: bytes) -> bool:
    """A DSH log starts with its session header. Pi's header has the same `type` (its own
    `timestamp`, no `createdAt`): it is never taken for a native one, even with a `version`."""
    for value in head_lines(head, limit=1):
        return isinstance(value, dict) and value.get("type") == "session" \
            and "version" in value and not is_pi_header(value)
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


def read_head(path: Path) -> bytes:
    """The first bytes of a file, decompressed when it is zstd; nothing when it cannot be read
    (the walk skips it as it skips any other file it cannot tell)."""
    try:
        with path.open("rb") as handle:
            return plain_prefix(handle.read(HEAD_BYTES))
    except OSError:
        return b""


def sniffs_as_log(path: Path) -> bool:
    """A walk's content check for a file whose name no agent claims: its first bytes are a
    native log or a format some importer recognises."""
    if not path.name.endswith(SNIFFED_SUFFIXES):
        return False
    head = read_head(path)
    if not head:
        return False
    if is_native(head):
        return True
    # A JSON document is taken only by a whole-document format: the record formats' recognisers
    # are lenient about lines they cannot parse, and every line of an indented document is one.
    records = is_record_stream(head)
    return any(spec.sniff(path, head) for spec in REGISTRY if records or spec.whole_document)


def passed_over(paths: Iterable[Path], taken: Iterable[Path]) -> Iterator[dict[str, str]]:
    """Files below the given directories that look like agent logs (a JSON file with session
    keys near its start) but that the walk did not take: each with why, and how to force it."""
    skip = set(taken)
    beside = {name for spec in REGISTRY for name in spec.reads_beside}
    for root in paths:
        if not root.is_dir():
            continue
        for child in sorted(root.rglob("*")):
            if child in skip or child.name in beside or not child.name.endswith(SNIFFED_SUFFIXES) \
                    or not child.is_file():
                continue
            head = document_head(read_head(child))
            keys = [key.decode()[1:-2] for key in LOG_KEYS if key in head]
            if keys:
                yield {"path": str(child),
                       "why": f"JSON with {', '.join(keys)} near its start, but no supported "
                              "format recognises its first bytes",
                       "force": f"recall ingest --format FORMAT {child} (FORMAT: "
                                f"{', '.join(FORMAT_NAMES)})"}


def source_of(path: PurePath) -> PurePath:
    """The source a companion file belongs to (`crush.db-wal` → `crush.db`, when some format
    reads that source with companions); any other path as it is."""
    for spec in REGISTRY:
        for suffix in spec.companions:
            if path.name.endswith(suffix):
                base = path.with_name(path.name[:-len(suffix)])
                if spec.claims(base):
                    return base
    return path


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
