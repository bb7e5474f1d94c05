"""Storage and read side: signed opaque paging cursors and request fingerprints (PROTOCOL §3.9)."""

from __future__ import annotations

import binascii
from typing import Any, NamedTuple

from indexer.config import MAX_SAFE_INTEGER
from indexer.errors import INVALID_CURSOR, STALE_CURSOR, query_error
from projections.codec import dumps, loads
from projections.hashing import hmac_sha256, sha256

CURSOR_VERSION = 1
#: Longer strings are not cursors this service issued (they are ~250 characters).
MAX_CURSOR_CHARS = 2048


def fingerprint(value: dict[str, Any]) -> str:
    """A digest of the canonical fingerprint JSON: equal requests, equal digests; short cursors."""
    return str(sha256(dumps(value)).hexdigest())


class CursorState(NamedTuple):
    """What a decoded cursor carries; `snapshot` names a pinned snapshot (snapshot consistency)."""

    offset: int
    generation: str
    snapshot: str | None


#: base64's URL-safe alphabet from the standard one (what `base64.urlsafe_b64encode` does)
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _urlsafe_b64(data: bytes) -> str:
    """`base64.urlsafe_b64encode(data)` as text, from binascii: a search issues cursors, and
    base64's import costs a short search more than encoding them."""
    return binascii.b2a_base64(data, newline=False).translate(_URLSAFE).decode("ascii")


def _mac(key: bytes, body: bytes) -> str:
    return _urlsafe_b64(hmac_sha256(key, body))


def encode_cursor(key: bytes, *, instance: str, scope: str, fingerprint: str, generation: str,
                  offset: int, snapshot: str | None = None) -> str:
    payload: dict[str, Any] = {"version": CURSOR_VERSION, "instance": instance, "scope": scope,
                               "fingerprint": fingerprint, "generation": generation,
                               "offset": offset}
    if snapshot is not None:
        payload["snapshot"] = snapshot
    body = dumps(payload)
    payload["mac"] = _mac(key, body)
    return _urlsafe_b64(dumps(payload)).rstrip("=")


def _invalid(message: str) -> Exception:
    return query_error(INVALID_CURSOR, message, hint="start the search again without a cursor")


def decode_cursor(key: bytes, cursor: str, *, instance: str, scope: str,
                  fingerprint: str) -> CursorState:
    """Checks in the protocol's order; any failure is INVALID_CURSOR. The generation is compared later.
    Only a flat object of scalars can be one of ours, so nothing else is re-serialized (a
    deeply nested payload would not survive orjson.dumps)."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise _invalid("cursor does not decode")
    import base64  # (only a request with a cursor reads one)

    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise _invalid("cursor does not decode") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("mac"), str) or not all(
            v is None or isinstance(v, str | int | float) for v in payload.values()):
        raise _invalid("cursor does not decode")
    mac = payload.pop("mac")
    from hmac import compare_digest  # (loads OpenSSL: only a request with a cursor needs it)

    if not compare_digest(mac, _mac(key, dumps(payload))):
        raise _invalid("cursor signature does not match")
    if payload.get("version") != CURSOR_VERSION:
        raise _invalid("cursor version is not 1")
    if (payload.get("instance") != instance or payload.get("scope") != scope
            or payload.get("fingerprint") != fingerprint):
        raise _invalid("cursor belongs to another service instance, scope or request")
    offset = payload.get("offset")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_SAFE_INTEGER:
        raise _invalid("cursor offset is not a safe integer >= 0")
    snapshot = payload.get("snapshot")
    return CursorState(offset, str(payload.get("generation")),
                       snapshot if isinstance(snapshot, str) else None)


def require_generation(state: CursorState, current: str) -> None:
    if state.generation != current:
        raise query_error(STALE_CURSOR, "the index changed since this cursor was issued",
                          hint="retry the complete search")
