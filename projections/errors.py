"""Errors for every stage of the flow: one root, stable codes from docs/PROTOCOL.md, and what to do next."""

from __future__ import annotations

from typing import Any

# The name `pip install` knows this project by (pyproject.toml [project] name): "session-recall"
# on PyPI is someone else's project, so an install hint naming it would install the wrong software.
DISTRIBUTION = "agent-session-recall"

# Codes for rejected input records (ours: docs/PROTOCOL.md names only query/reference codes). They are
# stable: dead-letter records and `--json` output carry them, and scripts match on them.
INGEST_MALFORMED_JSON = "INGEST_MALFORMED_JSON"
INGEST_INVALID_UTF8 = "INGEST_INVALID_UTF8"
INGEST_SCHEMA_VIOLATION = "INGEST_SCHEMA_VIOLATION"
INGEST_MISSING_HEADER = "INGEST_MISSING_HEADER"
INGEST_HEADER_CONFLICT = "INGEST_HEADER_CONFLICT"
INGEST_SEQ_GAP = "INGEST_SEQ_GAP"
INGEST_DUPLICATE_CONFLICT = "INGEST_DUPLICATE_CONFLICT"
INGEST_OVERSIZED_EVENT = "INGEST_OVERSIZED_EVENT"
INGEST_INVALID_SURFACE = "INGEST_INVALID_SURFACE"
INGEST_UNKNOWN_EVENT_TYPE = "INGEST_UNKNOWN_EVENT_TYPE"
INGEST_REWRITTEN_SOURCE = "INGEST_REWRITTEN_SOURCE"
INGEST_AFTER_REJECTED = "INGEST_AFTER_REJECTED"
INGEST_UNSUPPORTED_FORMAT = "INGEST_UNSUPPORTED_FORMAT"
INGEST_LOSSY_JSON = "INGEST_LOSSY_JSON"
INGEST_TOO_DEEP = "INGEST_TOO_DEEP"
INGEST_CORRUPT_COMPRESSION = "INGEST_CORRUPT_COMPRESSION"
INGEST_FILE_TOO_LARGE = "INGEST_FILE_TOO_LARGE"
INGEST_IMPORTER_FAILED = "INGEST_IMPORTER_FAILED"
#: not parked: a device, FIFO or socket named or linked as a log is refused before any read
INGEST_NOT_A_FILE = "INGEST_NOT_A_FILE"

# Codes of the operator-facing errors that are ours (docs/PROTOCOL.md names query/reference codes only).
RECALL_USAGE = "RECALL_USAGE"
RECALL_CONFIG_INVALID = "RECALL_CONFIG_INVALID"
RECALL_LOCK_TIMEOUT = "RECALL_LOCK_TIMEOUT"
RECALL_STORE_CORRUPT = "RECALL_STORE_CORRUPT"
RECALL_INDEX_DAMAGED = "RECALL_INDEX_DAMAGED"
RECALL_IO_ERROR = "RECALL_IO_ERROR"
RECALL_INTERNAL_ERROR = "RECALL_INTERNAL_ERROR"
RECALL_MISSING_EXTRA = "RECALL_MISSING_EXTRA"
RECALL_ERROR = "RECALL_ERROR"  # RecallError's own code, for an error raised without one
RECALL_AMBIGUOUS_SESSION = "RECALL_AMBIGUOUS_SESSION"
RECALL_NOT_WRITER = "RECALL_NOT_WRITER"
RECALL_SESSION_EXISTS = "RECALL_SESSION_EXISTS"
RECALL_REQUEST_TIMEOUT = "RECALL_REQUEST_TIMEOUT"
RECALL_UNKNOWN_OPERATION = "RECALL_UNKNOWN_OPERATION"
RECALL_UNSUPPORTED_HERE = "RECALL_UNSUPPORTED_HERE"
RECALL_WATCH_RUNNING = "RECALL_WATCH_RUNNING"
RECALL_SEMANTIC_UNAVAILABLE = "RECALL_SEMANTIC_UNAVAILABLE"  # semantic search, no vectors
RECALL_QUERY_TOO_LONG = "RECALL_QUERY_TOO_LONG"
#: a substring search on shards whose substring (trigram) index was never built, where the read
#: may not build it (over Kafka; a read-only data dir)
RECALL_SUBSTRING_INDEX_MISSING = "RECALL_SUBSTRING_INDEX_MISSING"
INGEST_STATE_CORRUPT = "INGEST_STATE_CORRUPT"

# The query API's codes (PROTOCOL §3.11), and ours beside them.
SESSION_QUERY_ABORTED = "SESSION_QUERY_ABORTED"
SESSION_QUERY_CORRUPT_SESSION = "SESSION_QUERY_CORRUPT_SESSION"
SESSION_QUERY_EVENT_NOT_FOUND = "SESSION_QUERY_EVENT_NOT_FOUND"
SESSION_QUERY_INDEX_FAILED = "SESSION_QUERY_INDEX_FAILED"
SESSION_QUERY_INVALID_CONFIG = "SESSION_QUERY_INVALID_CONFIG"
SESSION_QUERY_INVALID_CURSOR = "SESSION_QUERY_INVALID_CURSOR"
SESSION_QUERY_INVALID_FILTER = "SESSION_QUERY_INVALID_FILTER"
SESSION_QUERY_INVALID_LIMIT = "SESSION_QUERY_INVALID_LIMIT"
SESSION_QUERY_INVALID_LINEAGE = "SESSION_QUERY_INVALID_LINEAGE"
SESSION_QUERY_INVALID_QUERY = "SESSION_QUERY_INVALID_QUERY"
SESSION_QUERY_INVALID_SURFACE = "SESSION_QUERY_INVALID_SURFACE"
SESSION_QUERY_INVALID_WINDOW = "SESSION_QUERY_INVALID_WINDOW"
SESSION_QUERY_PERSISTENCE_FAILED = "SESSION_QUERY_PERSISTENCE_FAILED"
SESSION_QUERY_SEARCH_DISABLED = "SESSION_QUERY_SEARCH_DISABLED"
SESSION_QUERY_SESSION_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
SESSION_QUERY_SOURCE_CONFLICT = "SESSION_QUERY_SOURCE_CONFLICT"
SESSION_QUERY_STALE_CURSOR = "SESSION_QUERY_STALE_CURSOR"
# the agent tools' (recall mcp)
SESSION_QUERY_TOOL_FAILED = "SESSION_QUERY_TOOL_FAILED"
SESSION_QUERY_TOOL_MISSING_AGENT = "SESSION_QUERY_TOOL_MISSING_AGENT"
SESSION_QUERY_TOOL_NO_CURRENT_STEP = "SESSION_QUERY_TOOL_NO_CURRENT_STEP"
SESSION_QUERY_TOOL_TIMEOUT = "SESSION_QUERY_TOOL_TIMEOUT"
SESSION_QUERY_TOOL_UNAUTHORIZED = "SESSION_QUERY_TOOL_UNAUTHORIZED"
INVALID_ARGS = "INVALID_ARGS"  # a tool call's arguments do not fit its schema

# The reference API's codes (PROTOCOL §4.9).
SESSION_REFERENCE_BUDGET_EXCEEDED = "SESSION_REFERENCE_BUDGET_EXCEEDED"
SESSION_REFERENCE_CANCELLED = "SESSION_REFERENCE_CANCELLED"
SESSION_REFERENCE_INVALID_CONFIG = "SESSION_REFERENCE_INVALID_CONFIG"
SESSION_REFERENCE_INVALID_REFERENCE = "SESSION_REFERENCE_INVALID_REFERENCE"
SESSION_REFERENCE_READ_FAILED = "SESSION_REFERENCE_READ_FAILED"
SESSION_REFERENCE_SELF_REFERENCE = "SESSION_REFERENCE_SELF_REFERENCE"
SESSION_REFERENCE_TOO_MANY = "SESSION_REFERENCE_TOO_MANY"

# The Kafka runtime's.
STREAM_AUTH_FAILED = "STREAM_AUTH_FAILED"
STREAM_JOB_RUNNING = "STREAM_JOB_RUNNING"
STREAM_JOB_STALLED = "STREAM_JOB_STALLED"
STREAM_NO_BROKER = "STREAM_NO_BROKER"
STREAM_NOT_AUTHORIZED = "STREAM_NOT_AUTHORIZED"
STREAM_REQUEST_FORBIDDEN = "STREAM_REQUEST_FORBIDDEN"
STREAM_REQUEST_UNAUTHENTICATED = "STREAM_REQUEST_UNAUTHENTICATED"
STREAM_TLS_FAILED = "STREAM_TLS_FAILED"
STREAM_TOPIC_SETUP = "STREAM_TOPIC_SETUP"

#: The registry: every code an error of ours can carry (the constants above; the error-code
#: table of the docs is checked against it).
CODES = frozenset(value for name, value in dict(globals()).items()
                  if name.isupper() and name == value)

#: Process exit status of the CLI: 0 success, 1 an operation failed (any code above but
#: RECALL_USAGE / RECALL_CONFIG_INVALID), 2 the command line, a --request file or the settings
#: could not be understood (nothing was attempted).
EXIT_ERROR = 1
EXIT_USAGE = 2
USAGE_CODES = frozenset({RECALL_USAGE, RECALL_CONFIG_INVALID})


class RecallError(Exception):
    """Root of every error session-recall raises on purpose; `code` is stable, `hint` says what to do."""

    code: str = RECALL_ERROR
    hint: str = ""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if hint is not None:
            self.hint = hint
        self.message = message
        if cause is not None:
            self.__cause__ = cause

    def to_json(self) -> dict[str, Any]:
        """The wire form printed by the CLI and carried in replies: `{"code", "message"}`."""
        text = self.message if not self.hint else f"{self.message} ({self.hint})"
        return {"code": self.code, "message": text}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class SessionQueryError(RecallError):
    """A search or read request failed; `code` is one of PROTOCOL §3.11's SESSION_QUERY_* strings."""

    code = SESSION_QUERY_INDEX_FAILED


class FoldError(SessionQueryError):
    """`fold_surface` rejected an event: the log breaks PROTOCOL §2 (surface ops, provenance, contiguity)."""

    code = SESSION_QUERY_INVALID_SURFACE
    hint = "the log is invalid from this event on; fix or drop the offending event and re-ingest"

    def __init__(self, message: str, *, seq: int | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.index = index


class SessionReferenceError(RecallError):
    """Preparing a cross-session reference failed; `code` is one of PROTOCOL §4.9's SESSION_REFERENCE_*."""

    code = SESSION_REFERENCE_INVALID_REFERENCE


class InputRejected(RecallError):
    """An input record cannot enter the log; it is parked in the dead letters with this code."""

    code = INGEST_SCHEMA_VIOLATION
    hint = "the record was parked in the dead letters with its original bytes"


class UsageError(RecallError):
    """The command line or a request file cannot be understood; nothing was attempted (exit 2)."""

    code = RECALL_USAGE
    hint = "see `recall COMMAND --help`"


class ConfigError(RecallError):
    """A setting (RECALL_* variable, option or data dir) is unusable; fix it and run again."""

    code = RECALL_CONFIG_INVALID
    hint = "fix the setting named in the message (see docs/settings.md)"


class MissingExtra(RecallError):
    """A command needs an optional dependency group (an extra) that is not installed."""

    code = RECALL_MISSING_EXTRA

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(f"this command needs the '{extra}' extra (module {module!r} is not "
                         "installed)",
                         hint=f"pip install '{DISTRIBUTION}[{extra}]' (or, in a checkout, "
                              f"pip install -e '.[{extra}]'; `make setup` installs every extra)")


class LockTimeout(RecallError):
    """Another process kept the data dir's writer lock longer than RECALL_LOCK_TIMEOUT_S."""

    code = RECALL_LOCK_TIMEOUT
    hint = ("another recall command is writing to this data dir; run again when it has "
            "finished, or raise RECALL_LOCK_TIMEOUT_S")


class StoreCorrupt(RecallError):
    """A file of the local store (session log, registry, dead letters) cannot be read back."""

    code = RECALL_STORE_CORRUPT
    hint = "restore the named file from a backup or move it aside, then run the command again"


class IndexDamaged(RecallError):
    """The live index generation cannot be opened or read; the store can rebuild it."""

    code = RECALL_INDEX_DAMAGED
    hint = ("run `recall index check` for details; `recall reindex` rebuilds the index from the "
            "store and moves the damaged files aside")


class InternalError(RecallError):
    """A bug: an exception nobody anticipated; the CLI logs its traceback to a file."""

    code = RECALL_INTERNAL_ERROR
    hint = "this is a bug; the traceback was logged (see the message), please report it"


def is_usage(code: str) -> bool:
    """Codes that mean "the invocation was not understood" (exit status 2)."""
    return code in USAGE_CODES
