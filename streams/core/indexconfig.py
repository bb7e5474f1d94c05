"""Edge configuration: the index's configuration from the settings, for either runtime."""

from __future__ import annotations

import contextlib
import os
from importlib.util import find_spec
from typing import TYPE_CHECKING

from indexer import IndexConfig
from indexer.vectorsetting import fingerprint as semantic_fingerprint
from projections.codec import dumps_sorted, loads
from projections.hashing import sha256

if TYPE_CHECKING:  # the read path's light settings have the same fields (no pydantic)
    from streams.core.settings import Settings

#: Beside the data dir's index: the redaction rules' fingerprint and what it was made from.
FINGERPRINT_FILE = "redaction-fingerprint.json"


def index_config(settings: Settings, redaction: str | None = None) -> IndexConfig:
    """The shard set's configuration: its layout, limits and the redaction rules' fingerprint
    (`redaction`, else computed; an index built under other rules is rebuilt)."""
    return IndexConfig(shards=settings.shards, default_limit=settings.default_limit,
                       redaction=redaction or redaction_fingerprint(settings),
                       max_limit=settings.max_limit, snippet_chars=settings.snippet_chars,
                       read_window_max=settings.read_window_max,
                       live_window_ms=settings.live_window_ms,
                       snapshot_retention_s=settings.snapshot_retention_s,
                       substring=settings.substring,
                       semantic=semantic_fingerprint(settings.semantic,
                                                     settings.semantic_tool_output))


def _rules_source() -> str | None:
    """A digest of everything the rules are built from besides the settings: the detectors'
    module, the redaction engine and detect-secrets' version (None if one cannot be read)."""
    digest = sha256()
    try:
        for name in ("streams.core.detectors", "projections.redaction"):
            spec = find_spec(name)
            if spec is None or spec.origin is None:
                return None
            digest.update(_read(spec.origin))
        spec = find_spec("detect_secrets")
        if spec is None or spec.origin is None:
            return None
        digest.update(_read(os.path.join(os.path.dirname(spec.origin), "__version__.py")))
    except OSError:
        return None
    return str(digest.hexdigest())


def _read(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _fingerprint_key(settings: Settings) -> str | None:
    """What the kept fingerprint is keyed by (None if the rules' sources cannot be read)."""
    source = _rules_source()
    if source is None:
        return None
    return str(sha256(dumps_sorted([source, settings.redact_patterns,
                                    settings.redact_allow])).hexdigest())


def kept_redaction_fingerprint(settings: Settings) -> str | None:
    """The fingerprint of the redaction rules `settings` ask for without building them: the one
    kept in the data dir for exactly these rules, else None."""
    if not settings.redact:
        from projections.redaction import OFF

        return OFF
    key = _fingerprint_key(settings)
    if key is None:
        return None
    try:
        kept = loads(_read(os.path.join(settings.data_dir, FINGERPRINT_FILE)))
    except (OSError, ValueError):
        return None
    if isinstance(kept, dict) and kept.get("key") == key \
            and isinstance(kept.get("fingerprint"), str):
        return str(kept["fingerprint"])
    return None


def redaction_fingerprint(settings: Settings) -> str:
    """The fingerprint of the redaction rules `settings` ask for. Building the rules loads the
    secret detectors (detect-secrets, which imports requests); opening the index needs only
    their fingerprint, so it is kept in the data dir, keyed by everything it is made from, and
    the rules are built only when that changed (or when a write redacts)."""
    kept = kept_redaction_fingerprint(settings)
    if kept is not None:
        return kept
    from streams.core.detectors import build_redactor

    fingerprint = build_redactor(settings).fingerprint
    key = _fingerprint_key(settings)
    if key is not None and os.path.isdir(settings.data_dir):
        from pathlib import Path

        from streams.core.atomic import replace_file

        # a read-only data dir: the rules are built each time instead
        with contextlib.suppress(OSError):
            replace_file(Path(settings.data_dir) / FINGERPRINT_FILE,
                         dumps_sorted({"key": key, "fingerprint": fingerprint}), durable=False)
    return fingerprint
