"""Edge configuration: one frozen settings object, each field read from its RECALL_* variable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from projections.codec import dumps
from projections.errors import ConfigError
from streams.core.envsettings import default_data_dir  # one default


class Settings(BaseSettings):
    """Every setting of session-recall; the environment name of each is RECALL_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="RECALL_", frozen=True, extra="ignore")

    #: RECALL_DATA_DIR — embedded store, dead letters and index shards live here.
    data_dir: Path = Field(default_factory=lambda: Path(default_data_dir()))
    #: RECALL_SHARDS — number of index shard files (and Kafka partitions of the topics).
    shards: int = Field(default=8, ge=1, le=256)
    #: RECALL_BROKER — e.g. kafka://127.0.0.1:9092; unset means the embedded runtime.
    broker: str | None = None
    #: RECALL_KAFKA_SECURITY_PROTOCOL — how clients and workers reach the brokers:
    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (docs/kafka.md, "Connecting to a secured
    #: cluster"). RECALL_BROKER may list several bootstrap brokers: kafka://h1:9093,h2:9093.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = \
        "PLAINTEXT"
    #: RECALL_KAFKA_SSL_CAFILE — PEM file of the CA(s) the brokers' certificates must chain to;
    #: unset: the system's trusted CAs.
    kafka_ssl_cafile: Path | None = None
    #: RECALL_KAFKA_SSL_CERTFILE / RECALL_KAFKA_SSL_KEYFILE — client certificate and key (PEM)
    #: for brokers that require TLS client authentication; the key's passphrase, if any, in
    #: RECALL_KAFKA_SSL_KEY_PASSWORD.
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_key_password: SecretStr | None = None
    #: RECALL_KAFKA_SSL_CHECK_HOSTNAME — the broker's certificate must name the host connected
    #: to (on by default; off only for certificates without the right names).
    kafka_ssl_check_hostname: bool = True
    #: RECALL_KAFKA_SASL_MECHANISM — PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols).
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    #: RECALL_KAFKA_SASL_USERNAME / RECALL_KAFKA_SASL_PASSWORD — the SASL principal; the
    #: password is never logged or shown.
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    #: RECALL_KAFKA_REQUEST_KEY_ID / RECALL_KAFKA_REQUEST_KEY_FILE — a client's request key: its
    #: id and a file holding its secret; every request to the query workers is signed with it.
    kafka_request_key_id: str | None = None
    kafka_request_key_file: Path | None = None
    #: RECALL_KAFKA_REQUEST_KEYS — a query worker's keyfile (JSON: key id → secret and the
    #: workspaces that key may search); set, the worker answers signed requests only.
    kafka_request_keys: Path | None = None
    #: RECALL_KAFKA_REPLICATION_FACTOR — replicas of every topic the runtime creates (1 for a
    #: single broker; 3 on a production cluster, so a lost broker loses no record).
    kafka_replication_factor: int = Field(default=1, ge=1)
    #: RECALL_KAFKA_MIN_INSYNC_REPLICAS — `min.insync.replicas` of those topics: an `acks=all`
    #: write needs this many replicas (2 with a replication factor of 3); unset: the broker's.
    kafka_min_insync_replicas: int | None = Field(default=None, ge=1)
    #: RECALL_KAFKA_IDEMPOTENT — the events producer is idempotent (the broker drops a retried
    #: batch it already has, so a leader change duplicates no segment).
    kafka_idempotent: bool = False
    #: RECALL_TOPIC_PREFIX — topic names are <prefix>.events, <prefix>.documents, …
    topic_prefix: str = "recall"
    #: RECALL_SUBSTRING — trigram-index every document (not only CJK) from the index's creation;
    #: without it `recall index substring` builds that (embedded, also the first `--substring`
    #: search; over Kafka a search never does), then writers keep it. The trigram index is
    #: several times the size of the token index, hence off by default.
    substring: bool = False
    #: RECALL_SEMANTIC — write semantic vectors (the `semantic` extra's local model) beside the
    #: FTS rows, for `recall search --semantic`; an index made without them is rebuilt with
    #: them. An index that has them keeps them when a process runs without this setting.
    semantic: bool = False
    #: RECALL_SEMANTIC_TOOL_OUTPUT — embed tool output too (most of the bytes, mostly noise for
    #: recall by meaning; off by default).
    semantic_tool_output: bool = False
    #: RECALL_MAX_EVENT_BYTES — larger events (lines) are parked in the dead letters as bounded
    #: records (source, offset, length, digest); also the largest dead-letter record kept whole.
    max_event_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: RECALL_MAX_FILE_BYTES — a source file is read (decompressed) up to this many bytes; the
    #: rest is parked as a bounded INGEST_FILE_TOO_LARGE record.
    max_file_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    #: RECALL_LOCK_TIMEOUT_S — how long a writer waits for another one to finish with the data
    #: dir before failing with RECALL_LOCK_TIMEOUT.
    lock_timeout_s: float = Field(default=600.0, ge=0)
    #: RECALL_LIVE_WINDOW_MS — a session whose last event is this recent counts as live.
    live_window_ms: int = Field(default=10 * 60 * 1000, ge=0)
    #: RECALL_DEFAULT_LIMIT / RECALL_MAX_LIMIT — page sizes (PROTOCOL §3.10).
    default_limit: int = Field(default=20, ge=1)
    max_limit: int = Field(default=100, ge=1)
    #: RECALL_SNIPPET_CHARS — snippet bound in code points (PROTOCOL §3.7).
    snippet_chars: int = Field(default=240, ge=1)
    #: RECALL_READ_WINDOW_MAX — cap on before/after of a read (PROTOCOL §3.10).
    read_window_max: int = Field(default=50, ge=0)
    #: RECALL_SNAPSHOT_RETENTION_S — how long snapshot-paging cursors stay valid (and retired
    #: generations are kept); at least 1 s, as the index requires (0 passed here and then
    #: crashed a worker's index and query roles in a restart loop).
    snapshot_retention_s: int = Field(default=300, ge=1)
    #: RECALL_MAX_REFERENCES — sources per reference message (PROTOCOL §4.5: 1–3).
    max_references: int = 3
    #: RECALL_MAX_REFERENCE_BYTES — per-source budget of the serialized snapshot (PROTOCOL §4.5).
    max_reference_bytes: int = 65_536
    #: RECALL_CANDIDATE_LIMIT — default size of `recall candidates` (PROTOCOL §4.5).
    candidate_limit: int = 50
    #: RECALL_REQUEST_TIMEOUT_S — deadline of one request over Kafka request/reply.
    request_timeout_s: float = Field(default=30.0, gt=0)
    #: RECALL_SESSION_TIMEOUT_S — Kafka consumer-group session timeout (≥ 6 on noida-db/Kafka).
    session_timeout_s: float = Field(default=6.0, gt=0)
    #: RECALL_JOB_STALL_S — a reindex or replay gives up (STREAM_JOB_STALLED) when the fleet
    #: makes no progress for this long.
    job_stall_s: float = Field(default=120.0, gt=0)
    #: RECALL_JOB_LEASE_S — how long a reindex/replay job's lease outlives its last renewal
    #: (renewed every third of it): a killed job blocks the next one this long.
    job_lease_s: float = Field(default=10.0, gt=0)
    #: RECALL_WORKER_ID — this worker's stable identity in consumer groups (static
    #: membership); default: host name + a hash of RECALL_DATA_DIR.
    worker_id: str | None = None
    #: RECALL_HEARTBEAT_S — Kafka consumer-group heartbeat interval: a third of the session
    #: timeout, as Kafka advises (a member learns of a rebalance at its next heartbeat; each
    #: heartbeat is a request of every idle group member).
    heartbeat_s: float = Field(default=2.0, gt=0)
    #: RECALL_WATCH_PATHS — what `recall watch` follows without PATH arguments (separated by
    #: os.pathsep); unset: every supported agent's default log folders.
    watch_paths: str | None = None
    #: RECALL_REDACT — replace secrets by `[redacted:<kind>]` before anything is indexed,
    #: snippeted, read out or referenced (on by default; `off` for raw search of your own logs).
    #: The store keeps the original log; a change of rules rebuilds the index from it.
    redact: bool = True
    #: RECALL_REDACT_PATTERNS — extra secrets, a JSON object `{"kind": "regex"}`: the regex's
    #: first group is the secret (else the whole match), replaced by `[redacted:<kind>]`.
    redact_patterns: dict[str, str] = Field(default_factory=dict)
    #: RECALL_REDACT_ALLOW — a JSON list of regexes: a found value one matches entirely stays.
    redact_allow: list[str] = Field(default_factory=list)

    @field_validator("redact_patterns")
    @classmethod
    def _patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for kind, source in value.items():
            if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", kind):
                raise ValueError(f"kind {kind!r} must be lowercase words joined by '-'")
            if _compile(source, f"pattern of {kind!r}").fullmatch(""):
                raise ValueError(f"the pattern of {kind!r} matches the empty string")
        return value

    @field_validator("redact_allow")
    @classmethod
    def _allow(cls, value: list[str]) -> list[str]:
        for source in value:
            _compile(source, "entry")
        return value


def _compile(source: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(source)
    except re.error as exc:
        raise ValueError(f"{what} {source!r} is not a valid regular expression: {exc}") from None


def handover_json(settings: Settings) -> str:
    """The settings as JSON for a child process's environment, secrets included: the child runs
    with them as this process does (a plain dump would hand it `**********` for a password)."""
    data = settings.model_dump(mode="json")
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            data[name] = value.get_secret_value()
    return dumps(data).decode("utf-8")


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment plus overrides; a bad value is a ConfigError naming the
    variable, never a pydantic traceback."""
    try:
        # a data dir given is the settings' own, so the default (which needs a home directory)
        # is never looked for
        given = {"data_dir": overrides["data_dir"]} if "data_dir" in overrides else {}
        settings = Settings(**given)
        return settings.model_copy(update=overrides) if overrides else settings
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error.get("loc", ())) or "settings"
            problems.append(f"RECALL_{field.upper()}: {error.get('msg', 'invalid')}")
        raise ConfigError("; ".join(problems)) from None
