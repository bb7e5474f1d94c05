"""Who may ask what over Kafka: signed requests and the workspaces each request key may search.

Anyone who can write `<p>.requests` could otherwise search every workspace. A query worker
given a keyfile (RECALL_KAFKA_REQUEST_KEYS) answers only requests signed with one of its keys —
an HMAC-SHA256 of the record's value bytes, in the record headers `recall-key` (key id) and
`recall-signature` (hex) — and answers each as if the only sessions were those of the key's
workspaces. The workspace rule is the agent tools' (streams/faces/mcp/auth.py, PROTOCOL §6.2):
a session belongs to workspace W when its header's `cwd` is exactly W; any other session is
answered exactly as a missing one (the same code and message, the same empty listing), so an
answer never tells a hidden session from an absent one.

The signature binds the whole request (id, op, args, replyTo, deadline): a copy replayed before
its deadline can only be the same request again, answered to the replyTo the signer chose.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from indexer.errors import SESSION_NOT_FOUND, query_error
from indexer.listing import select_listing
from projections.codec import loads
from projections.errors import (
    STREAM_REQUEST_FORBIDDEN,
    STREAM_REQUEST_UNAUTHENTICATED,
    ConfigError,
    RecallError,
)
from streams.core.settings import Settings

KEY_HEADER = "recall-key"
SIGNATURE_HEADER = "recall-signature"
#: Shortest secret accepted (bytes): a short one could be guessed from signed requests.
MIN_SECRET_BYTES = 16

Headers = Sequence[tuple[str, bytes]]


def signature(secret: bytes, value: bytes) -> str:
    return hmac.new(secret, value, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Signer:
    """A client's request key: signs each request's value bytes."""

    key_id: str
    secret: bytes

    def headers(self, value: bytes) -> list[tuple[str, bytes]]:
        return [(KEY_HEADER, self.key_id.encode("utf-8")),
                (SIGNATURE_HEADER, signature(self.secret, value).encode("ascii"))]


def _secret(text: str, where: str) -> bytes:
    secret = text.strip().encode("utf-8")
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"{where}: a request key's secret needs at least {MIN_SECRET_BYTES} "
                          "bytes (e.g. `openssl rand -hex 32`)")
    return secret


def request_signer(settings: Settings) -> Signer | None:
    """The client's signer from RECALL_KAFKA_REQUEST_KEY_ID / _FILE (None when unset)."""
    key_id, path = settings.kafka_request_key_id, settings.kafka_request_key_file
    if key_id is None and path is None:
        return None
    if key_id is None or path is None:
        raise ConfigError("RECALL_KAFKA_REQUEST_KEY_ID and RECALL_KAFKA_REQUEST_KEY_FILE go "
                          "together (a key id and the file holding its secret)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"RECALL_KAFKA_REQUEST_KEY_FILE: {path} cannot be read: "
                          f"{exc.__class__.__name__}") from None
    return Signer(key_id, _secret(text, "RECALL_KAFKA_REQUEST_KEY_FILE"))


class _KeyEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    secret: str = Field(min_length=1)
    #: absolute workspace paths (a session's `cwd`), or "*" for every workspace
    workspaces: list[str] | Literal["*"]


class _KeyFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    keys: dict[str, _KeyEntry]


@dataclass(frozen=True, slots=True)
class Grant:
    """What one verified request may see: `workspaces` None means every session."""

    key_id: str
    workspaces: frozenset[str] | None


class Unauthenticated(RecallError):
    code = STREAM_REQUEST_UNAUTHENTICATED
    hint = ("set RECALL_KAFKA_REQUEST_KEY_ID and RECALL_KAFKA_REQUEST_KEY_FILE to a key of the "
            "query workers' keyfile (RECALL_KAFKA_REQUEST_KEYS)")


@dataclass(frozen=True, slots=True)
class KeyRing:
    """A query worker's keys: key id → (secret, allowed workspaces)."""

    keys: Mapping[str, tuple[bytes, frozenset[str] | None]]

    @classmethod
    def load(cls, path: Path) -> KeyRing:
        try:
            parsed = _KeyFile.model_validate(loads(path.read_bytes()))
        except OSError as exc:
            raise ConfigError(f"RECALL_KAFKA_REQUEST_KEYS: {path} cannot be read: "
                              f"{exc.__class__.__name__}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ConfigError(f"RECALL_KAFKA_REQUEST_KEYS: {path} is not a keyfile "
                              f"({where}: {first.get('msg')}); expected "
                              '{"keys": {"<id>": {"secret": "…", "workspaces": ["/path"] '
                              'or "*"}}}') from None
        except ValueError as exc:  # not JSON
            raise ConfigError(f"RECALL_KAFKA_REQUEST_KEYS: {path} is not JSON: "
                              f"{str(exc)[:200]}") from None
        return cls({key_id: (_secret(entry.secret, f"RECALL_KAFKA_REQUEST_KEYS key {key_id!r}"),
                             None if entry.workspaces == "*" else frozenset(entry.workspaces))
                    for key_id, entry in parsed.keys.items()})

    def verify(self, value: bytes, headers: Headers) -> Grant:
        """The grant of a correctly signed request; Unauthenticated (saying which check failed,
        never a secret) otherwise."""
        found = {name: raw for name, raw in headers if name in (KEY_HEADER, SIGNATURE_HEADER)}
        if KEY_HEADER not in found or SIGNATURE_HEADER not in found:
            raise Unauthenticated("the query workers answer signed requests only; this one "
                                  "carries no request key")
        key_id = found[KEY_HEADER].decode("utf-8", "replace")
        entry = self.keys.get(key_id)
        expected = signature(entry[0], value) if entry is not None else ""
        given = found[SIGNATURE_HEADER].decode("ascii", "replace")
        # one message for an unknown key id and a wrong secret: which ids exist stays unsaid
        if entry is None or not hmac.compare_digest(expected, given):
            raise Unauthenticated(f"the request's signature does not verify for request key "
                                  f"{key_id!r} (unknown key id or wrong secret)")
        return Grant(key_id, entry[1])


def forbidden(op: str) -> RecallError:
    return RecallError(f"{op} covers every workspace of the fleet; this request key may search "
                       "only some", code=STREAM_REQUEST_FORBIDDEN,
                       hint="ask with a key whose workspaces are \"*\"")


def in_workspaces(header: Any, workspaces: frozenset[str]) -> bool:
    """The agent tools' rule: a session is a workspace's when its header's cwd is exactly it."""
    return isinstance(header, Mapping) and header.get("cwd") in workspaces


def _missing(session_id: str) -> RecallError:
    # the indexer's own answer for a session it does not have (indexer.reads / indexer.service)
    return query_error(SESSION_NOT_FOUND, f"session {session_id!r} not found")


class WorkspaceQuery:
    """A coordinator's RemoteQuery seen through a grant: sessions outside the grant's
    workspaces are answered as missing ones, listings and searches hold none of them."""

    def __init__(self, inner: Any, workspaces: frozenset[str]) -> None:
        self.inner = inner
        self.settings = inner.settings
        self.workspaces = workspaces

    def _cwd_filter(self) -> dict[str, Any]:
        return {"kind": "cwd", "values": sorted(self.workspaces)}

    def _visible(self, session_id: Any) -> bool:
        if not isinstance(session_id, str):
            return True  # the inner call rejects it as it rejects it for anyone
        found = self.inner.filter_sessions([{"kind": "id", "values": [session_id]},
                                            self._cwd_filter()])
        return any(r["header"].get("id") == session_id and in_workspaces(r["header"],
                                                                         self.workspaces)
                   for r in found)

    def _check(self, session_id: Any) -> None:
        if not self._visible(session_id):
            raise _missing(session_id)

    def _keep(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if in_workspaces(r.get("header"), self.workspaces)]

    # --- listings and cross-session search: the workspaces' sessions only ---------------------

    def filter_sessions(self, filters: Any, *, now_ms: int | None = None,
                        limit: int | None = None,
                        title: str | None = None) -> list[dict[str, Any]]:
        # The title search and the limit apply after the workspace check (`_keep`), so they
        # are not passed inward.
        if filters is not None and not isinstance(filters, list):
            kept = self._keep(self.inner.filter_sessions(filters, now_ms=now_ms))
        else:
            scoped = [*(filters or []), self._cwd_filter()]
            kept = self._keep(self.inner.filter_sessions(scoped, now_ms=now_ms))
        return select_listing(kept, title=title, limit=limit)

    def list_sessions(self, *, now_ms: int | None = None, limit: int | None = None,
                      title: str | None = None) -> list[dict[str, Any]]:
        return self.filter_sessions(None, now_ms=now_ms, limit=limit, title=title)

    def search_sessions(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        if not isinstance(request, Mapping) or not isinstance(
                request.get("sessionFilters", []), list | None):
            return dict(self.inner.search_sessions(request, now_ms=now_ms))
        scoped = {**request, "sessionFilters": [*(request.get("sessionFilters") or []),
                                                self._cwd_filter()]}
        result = dict(self.inner.search_sessions(scoped, now_ms=now_ms))
        result["items"] = self._keep(list(result.get("items", [])))
        return result

    def trace_session(self, session_id: str) -> dict[str, Any]:
        # the lineage of the visible sessions only: a hidden parent or child is not there
        inner = self.inner
        answers = [[h for h in answer if in_workspaces(h, self.workspaces)]
                   for answer in inner.scatter("shard.headers", {})]
        return dict(inner.coordinator.trace_session(answers, session_id))

    # --- one session: a hidden one is a missing one -------------------------------------------

    def search_events(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        if isinstance(request, Mapping):
            self._check(request.get("sessionId"))
        return dict(self.inner.search_events(request, now_ms=now_ms))

    def read_session(self, session_id: str) -> dict[str, Any]:
        self._check(session_id)
        return dict(self.inner.read_session(session_id))

    def read_surface(self, session_id: str) -> dict[str, Any]:
        self._check(session_id)
        return dict(self.inner.read_surface(session_id))

    def read_event(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check(request.get("sessionId"))
        return dict(self.inner.read_event(request))

    def read_transcript(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check(request.get("sessionId"))
        return dict(self.inner.read_transcript(request))

    def trace_event(self, session_id: str, seq: int) -> dict[str, Any]:
        self._check(session_id)
        return dict(self.inner.trace_event(session_id, seq))

    def filter_events(self, session_id: str, filters: Any) -> dict[str, Any]:
        self._check(session_id)
        return dict(self.inner.filter_events(session_id, filters))

    def index_digest(self) -> dict[str, Any]:
        raise forbidden("index_digest")

    def substring_index(self) -> dict[str, Any]:
        # whether substring search works says nothing about any session
        return dict(self.inner.substring_index())

    def build_substring_index(self) -> dict[str, Any]:
        raise forbidden("build_substring_index")

    def close(self) -> None:
        """Nothing to release: the transport belongs to the worker."""
