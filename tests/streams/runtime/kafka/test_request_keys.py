"""Request keys: a client signs the exact request bytes; a worker's keyring accepts only a valid
signature of a known key and grants that key's workspaces; a bad keyfile or key file is
RECALL_CONFIG_INVALID naming the variable, without the secret."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from projections.errors import ConfigError
from streams.core.settings import Settings
from streams.runtime.kafka.workspaces import (
    KEY_HEADER,
    SIGNATURE_HEADER,
    Grant,
    KeyRing,
    Signer,
    Unauthenticated,
    in_workspaces,
    request_signer,
)

SECRET_A = "a" * 32
SECRET_OPS = "0123456789abcdef0123456789abcdef"
REQUEST = b'{"id":"r1","replyTo":"p.replies:0","op":"list_sessions","args":{},"deadlineMs":1}'


@pytest.fixture
def ring(tmp_path: Path) -> KeyRing:
    path = tmp_path / "keys.json"
    path.write_bytes(orjson.dumps({"keys": {
        "team-a": {"secret": SECRET_A, "workspaces": ["/w/a"]},
        "ops": {"secret": SECRET_OPS, "workspaces": "*"}}}))
    return KeyRing.load(path)


def test_a_signed_request_is_granted_its_keys_workspaces(ring: KeyRing) -> None:
    headers = Signer("team-a", SECRET_A.encode()).headers(REQUEST)
    assert ring.verify(REQUEST, headers) == Grant("team-a", frozenset({"/w/a"}))
    ops = Signer("ops", SECRET_OPS.encode()).headers(REQUEST)
    assert ring.verify(REQUEST, ops) == Grant("ops", None)


@pytest.mark.parametrize("case", ["unsigned", "other bytes", "wrong secret", "unknown key"])
def test_anything_but_a_valid_signature_is_refused(ring: KeyRing, case: str) -> None:
    signer = Signer("team-a", SECRET_A.encode())
    headers = {
        "unsigned": [],
        "other bytes": signer.headers(REQUEST.replace(b"list_sessions", b"index_digest")),
        "wrong secret": Signer("team-a", b"b" * 32).headers(REQUEST),
        "unknown key": Signer("nobody", SECRET_A.encode()).headers(REQUEST),
    }[case]
    with pytest.raises(Unauthenticated) as caught:
        ring.verify(REQUEST, headers)
    assert caught.value.code == "STREAM_REQUEST_UNAUTHENTICATED"
    assert SECRET_A not in caught.value.message
    if case in ("wrong secret", "unknown key"):  # one answer: which ids exist stays unsaid
        assert "unknown key id or wrong secret" in caught.value.message


def test_the_headers_name_the_key_and_carry_a_hex_hmac() -> None:
    headers = dict(Signer("k", SECRET_A.encode()).headers(REQUEST))
    assert headers[KEY_HEADER] == b"k"
    assert len(headers[SIGNATURE_HEADER]) == 64 and int(headers[SIGNATURE_HEADER], 16) >= 0


def test_the_workspace_rule_is_exact_cwd_equality() -> None:
    allowed = frozenset({"/w/a"})
    assert in_workspaces({"id": "s", "cwd": "/w/a"}, allowed)
    assert not in_workspaces({"id": "s", "cwd": "/w/a/sub"}, allowed)
    assert not in_workspaces({"id": "s", "cwd": None}, allowed)
    assert not in_workspaces(None, allowed)


@pytest.mark.parametrize("content", [
    b"not json", b'{"keys": {"k": {"secret": "short", "workspaces": "*"}}}',
    b'{"keys": {"k": {"secret": "' + b"x" * 32 + b'"}}}', b'{"key": {}}'])
def test_a_bad_keyfile_names_the_variable(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        KeyRing.load(path)
    assert "RECALL_KAFKA_REQUEST_KEYS" in caught.value.message


def test_the_client_key_needs_its_id_and_file(tmp_path: Path) -> None:
    assert request_signer(Settings()) is None
    secret = tmp_path / "key"
    secret.write_text(SECRET_A + "\n")
    signer = request_signer(Settings(kafka_request_key_id="team-a",
                                     kafka_request_key_file=secret))
    assert signer == Signer("team-a", SECRET_A.encode())
    with pytest.raises(ConfigError, match="RECALL_KAFKA_REQUEST_KEY_ID"):
        request_signer(Settings(kafka_request_key_file=secret))
    with pytest.raises(ConfigError, match="RECALL_KAFKA_REQUEST_KEY_FILE"):
        request_signer(Settings(kafka_request_key_id="x",
                                kafka_request_key_file=tmp_path / "missing"))
