"""The read path's digests equal hashlib's and hmac's, and computing them loads no OpenSSL."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys

import pytest

from projections.hashing import blake2b, hmac_sha256, sha256

MESSAGES = [b"", b"abc", b"x" * 63, b"y" * 64, b"z" * 65, bytes(range(256)) * 9]
#: Shorter than SHA-256's 64-byte block, exactly one, and longer (hashed first).
KEYS = [b"", b"k", bytes(range(32)), b"\xff" * 64, b"\x00" * 64, bytes(range(65)), b"q" * 200]


@pytest.mark.parametrize("message", MESSAGES)
def test_sha256_is_hashlibs(message: bytes) -> None:
    assert sha256(message).hexdigest() == hashlib.sha256(message).hexdigest()
    grown = sha256()
    grown.update(message[:7])
    grown.update(message[7:])
    assert grown.digest() == hashlib.sha256(message).digest()


@pytest.mark.parametrize("key", KEYS)
def test_blake2b_keyed_and_personalized_is_hashlibs(key: bytes) -> None:
    assert (blake2b(key, digest_size=12, person=b"recall-cursor").hexdigest()
            == hashlib.blake2b(key, digest_size=12, person=b"recall-cursor").hexdigest())
    assert blake2b(b"m", key=key[:64]).digest() == hashlib.blake2b(b"m", key=key[:64]).digest()


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("message", MESSAGES)
def test_hmac_sha256_is_hmacs(key: bytes, message: bytes) -> None:
    assert hmac_sha256(key, message) == hmac.new(key, message, hashlib.sha256).digest()


def test_a_digest_loads_no_openssl() -> None:
    code = ("import sys\n"
            "from projections.hashing import blake2b, hmac_sha256, sha256\n"
            "sha256(b'a').hexdigest(); blake2b(b'a', digest_size=12).hexdigest()\n"
            "hmac_sha256(b'k', b'm')\n"
            "print(sorted({'_hashlib', 'hashlib', 'hmac', '_ssl'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
