"""The digests the read path takes (SHA-256, BLAKE2b, HMAC-SHA-256), from CPython's own
implementations where it has them.

`hashlib` loads OpenSSL when it is imported (libcrypto, its configuration, a probe of every
algorithm it names), which costs a short command such as `recall search` more than the digests
it computes. CPython ships SHA-256 and BLAKE2b as modules of their own (`_sha256` up to 3.11,
`_sha2` from 3.12; `_blake2`), which compute the same digests; where neither is present this
falls back to `hashlib`. The HMAC is RFC 2104 as the stdlib `hmac` module computes it in
Python (tests/projections/test_hashing.py holds it to `hmac.new`); `hmac` itself also loads
OpenSSL.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_BLOCK = 64  # SHA-256's block size, in bytes
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def _constructor(name: str, modules: tuple[str, ...]) -> Any:
    for module in modules:
        try:
            return getattr(import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return getattr(import_module("hashlib"), name)


#: `sha256(data=b"")`: a hash object as `hashlib.sha256` returns (update, digest, hexdigest).
sha256: Any = _constructor("sha256", ("_sha256", "_sha2"))
#: `blake2b(data=b"", *, digest_size, key, person, ...)` as `hashlib.blake2b`.
blake2b: Any = _constructor("blake2b", ("_blake2",))


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA-256 of `message` under `key`: `hmac.new(key, message, hashlib.sha256).digest()`."""
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_INNER) + message).digest()
    return bytes(sha256(key.translate(_OUTER) + inner).digest())
