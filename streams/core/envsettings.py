"""The settings a read (`recall search`, `recall sessions`) needs, read from the environment
without pydantic: the same values `Settings` (streams/core/settings.py) gives, or None when this
reader cannot vouch for that (a setting it does not read, or a value not in the one plain
spelling it accepts); the caller then loads `Settings`, which reads or rejects it.
tests/streams/core/test_envsettings.py holds the two to the same defaults, bounds and values."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from projections.errors import ConfigError

PREFIX = "RECALL_"


def default_data_dir() -> str:
    """$XDG_DATA_HOME/session-recall, else ~/.local/share/session-recall; ConfigError where
    neither is known (no HOME and no home in the user database, as for an arbitrary container
    user)."""
    base = os.environ.get("XDG_DATA_HOME")
    if not base:
        home = os.path.expanduser("~")  # (what Path.home() reads)
        if home == "~":
            raise ConfigError("no data dir was given and there is no home directory to hold "
                              "the default one ($XDG_DATA_HOME and $HOME are unset)",
                              hint="pass --data-dir DIR or set RECALL_DATA_DIR")
        base = os.path.join(home, ".local", "share")
    return os.path.join(base, "session-recall")


class Int:
    """An integer setting within [lo, hi] (None: unbounded)."""

    def __init__(self, lo: int | None = None, hi: int | None = None) -> None:
        self.lo, self.hi = lo, hi

    def read(self, text: str) -> int | None:
        if not re.fullmatch(r"0|[1-9][0-9]{0,17}", text):
            return None
        value = int(text)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return None
        return value


class Bool:
    """A boolean setting, spelled 0, 1, false or true."""

    def read(self, text: str) -> bool | None:
        return {"0": False, "false": False, "1": True, "true": True}.get(text)


#: Every field of `Settings`: another RECALL_* variable (e.g. RECALL_MCP_SESSION, read by
#: `recall mcp`) is no setting, and Settings ignores it.
SETTING_NAMES = frozenset({
    "broker", "candidate_limit", "data_dir", "default_limit", "heartbeat_s",
    "job_lease_s", "job_stall_s", "kafka_idempotent", "kafka_min_insync_replicas",
    "kafka_replication_factor", "kafka_request_key_file", "kafka_request_key_id",
    "kafka_request_keys", "kafka_sasl_mechanism", "kafka_sasl_password", "kafka_sasl_username",
    "kafka_security_protocol", "kafka_ssl_cafile", "kafka_ssl_certfile",
    "kafka_ssl_check_hostname", "kafka_ssl_key_password", "kafka_ssl_keyfile",
    "live_window_ms", "lock_timeout_s", "max_event_bytes", "max_file_bytes", "max_limit",
    "max_reference_bytes", "max_references", "read_window_max", "redact", "redact_allow",
    "redact_patterns", "request_timeout_s", "semantic", "semantic_tool_output",
    "session_timeout_s", "shards", "snapshot_retention_s", "snippet_chars", "substring",
    "topic_prefix", "watch_paths", "worker_id",
})
#: The read path's settings: each one's reading rule (its default is `LightSettings`'s).
FIELDS: dict[str, Int | Bool] = {
    "shards": Int(1, 256), "default_limit": Int(1), "max_limit": Int(1),
    "snippet_chars": Int(1), "read_window_max": Int(0), "live_window_ms": Int(0),
    "snapshot_retention_s": Int(1), "substring": Bool(), "semantic": Bool(),
    "semantic_tool_output": Bool(), "redact": Bool(),
}


class LightSettings(NamedTuple):
    """The fields of `Settings` a read uses, with its defaults (`light_settings` gives the
    first three theirs: `default_data_dir()` and no redaction rules of its own). A NamedTuple:
    a dataclass compiles its generated methods as its module loads, at every command's start."""

    data_dir: str  # (a string: a read loads no pathlib)
    redact_patterns: dict[str, str]  # (the reader takes no RECALL_REDACT_* rules: none)
    redact_allow: list[str]
    shards: int = 8
    default_limit: int = 20
    max_limit: int = 100
    snippet_chars: int = 240
    read_window_max: int = 50
    live_window_ms: int = 10 * 60 * 1000
    snapshot_retention_s: int = 300
    substring: bool = False
    semantic: bool = False
    semantic_tool_output: bool = False
    redact: bool = True


def light_settings(environ: Mapping[str, str] | None = None,
                   data_dir: str | None = None) -> LightSettings | None:
    """The read path's settings from `environ` (default: os.environ) and a --data-dir value,
    or None when only `Settings` can say what they are."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for key, text in env.items():
        upper = key.upper()
        if not upper.startswith(PREFIX):
            continue
        name = upper[len(PREFIX):].lower()
        if name not in SETTING_NAMES:
            continue
        if name == "data_dir":
            if key != "RECALL_DATA_DIR":
                return None
            continue  # the CLI's --data-dir option reads it (below)
        rule = FIELDS.get(name)
        if rule is None or name in values:
            return None
        value = rule.read(text)
        if value is None:
            return None
        values[name] = value
    where = data_dir if data_dir is not None else env.get("RECALL_DATA_DIR")
    if where is not None:
        if not where or "\x00" in where:
            return None
        values["data_dir"] = where
    else:
        try:
            values["data_dir"] = default_data_dir()
        except ConfigError:
            return None  # (Settings reports it)
    return LightSettings(redact_patterns={}, redact_allow=[], **values)
