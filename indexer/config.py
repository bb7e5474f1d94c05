"""Storage and read side: the frozen index configuration (PROTOCOL §3.10 keys plus our extensions)."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from indexer.errors import INVALID_CONFIG, query_error

MAX_SAFE_INTEGER = 2**53 - 1
OpenAt = Literal["startup", "first-search", "never"]
_OPEN_AT = ("startup", "first-search", "never")


def _positive_int(name: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SAFE_INTEGER:
        raise query_error(INVALID_CONFIG, f"{name} must be an integer >= {minimum}, got {value!r}")


class _Fields(NamedTuple):
    """IndexConfig's fields and defaults. A NamedTuple, as the read path's other records: a
    dataclass compiles its generated methods as its module loads, which every short command
    (`recall search`) would pay."""

    shards: int = 8
    open_at: OpenAt = "startup"
    default_limit: int = 20
    max_limit: int = 100
    snippet_chars: int = 240
    read_window_max: int = 50
    live_window_ms: int = 600_000
    #: Snapshot cursors pin a read transaction; the window bounds how long the WAL cannot shrink.
    snapshot_retention_s: float = 300.0
    #: At most this many pinned snapshots; the oldest is released (its cursors turn STALE).
    max_snapshots: int = 16
    #: Trigram-index every document, not only CJK ones (costs roughly 3x the token index).
    substring: bool = False
    #: Fingerprint of the redaction rules the index's records were made with ("off": none).
    #: Recorded in every shard; a shard recorded with other rules is outdated (rebuilt).
    redaction: str = "off"
    #: Semantic vectors written with the events (indexer/semantic.py's fingerprint; "off": none).
    #: A shard keeps the setting it was made with; one made without vectors is rebuilt with.
    semantic: str = "off"


class IndexConfig(_Fields):
    """Validated on construction; an invalid value raises SESSION_QUERY_INVALID_CONFIG."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> IndexConfig:
        self = super().__new__(cls, *args, **kwargs)
        self._validate()
        return self

    def _validate(self) -> None:
        _positive_int("shards", self.shards)
        if self.shards > 4096:
            raise query_error(INVALID_CONFIG, "shards must be at most 4096")
        if self.open_at not in _OPEN_AT:
            raise query_error(INVALID_CONFIG, f"openAt must be one of {_OPEN_AT}, got {self.open_at!r}")
        _positive_int("defaultLimit", self.default_limit)
        _positive_int("maxLimit", self.max_limit)
        if self.default_limit > self.max_limit:
            raise query_error(INVALID_CONFIG, "defaultLimit must not exceed maxLimit")
        _positive_int("snippetChars", self.snippet_chars)
        _positive_int("readWindowMax", self.read_window_max, minimum=0)
        _positive_int("liveWindowMs", self.live_window_ms, minimum=0)
        _positive_int("maxSnapshots", self.max_snapshots)
        retention = self.snapshot_retention_s
        if isinstance(retention, bool) or not isinstance(retention, int | float) or not retention > 0:
            raise query_error(INVALID_CONFIG, "snapshotRetentionS must be a positive number")
        if not isinstance(self.substring, bool):
            raise query_error(INVALID_CONFIG, "substring must be a boolean")
        if not isinstance(self.redaction, str) or not self.redaction:
            raise query_error(INVALID_CONFIG, "redaction must be a rules fingerprint")
        if not isinstance(self.semantic, str) or not self.semantic:
            raise query_error(INVALID_CONFIG, "semantic must be a model fingerprint or 'off'")
