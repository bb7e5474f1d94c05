"""The default detectors (detect-secrets + agent-log rules): every kind caught in context, and no
redaction of look-alike non-secrets — git SHAs, UUIDs, lockfile hashes, base64, code, the real
agent logs in tests/data. Counts printed here are the issue's false-positive report."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from secretcorpus import code_corpus, planted_secrets

from projections.errors import ConfigError
from projections.redaction import NO_REDACTION, Redactor, marker
from streams.core.detectors import (
    agent_log_rules,
    build_redactor,
    default_redactor,
    library_rules,
    make_redactor,
)
from streams.core.settings import Settings
from streams.ingest.importers import IMPORTERS, detect_format

DATA = Path(__file__).resolve().parents[1] / "data"
REDACTOR = default_redactor()


@pytest.mark.parametrize("planted", planted_secrets(), ids=lambda p: p.kind)
def test_every_planted_secret_is_replaced_by_its_kind(planted: Any) -> None:
    out = REDACTOR.redact_text(planted.text)
    assert planted.value not in out
    assert marker(planted.kind) in out


def test_every_rule_of_the_catalogue_is_exercised() -> None:
    """Each rule alone finds something in the planted corpus or its samples (a rule whose
    hints or pattern drifted would find nothing)."""
    samples = [p.text for p in planted_secrets()] + [
        "https://hooks.slack.com/services/T0" + "ABCDEF12/B0ABCDEF12/abcdefghijklmnop1234",
        "GR1348941" + "abcdefghij0123456789xy", "glcbt-" + "ab_abcdefghij0123456789",
        "glimt-" + "abcdefghij0123456789abcde", "glptt-" + "abcdefghij0123456789" * 2,
        "glagent-" + "abcdefghij0123456789" * 3, "gloas-" + "abcdefgh01234567" * 4,
        "pypi-" + "AgENdGVzdC5weXBpLm9yZw" + "abcdefghij0123456789" * 4,
        "//registry.npmjs.org/:_authToken=" + "npm_" + "abcdefghij0123456789ABCDEFGHIJ123456",
        "sk_" + "test_" + "abcdefghij0123456789ABCD", "AC" + "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d",
        "xapp-" + "1-A0123ABCDEF-1234567890-abcdef0123456789",
        "sk-" + "abcdefghij0123456789ABCDEFGHIJ0123456789abcdefgh",
        "Authorization: " + "token abcdef0123456789abcd",
        "SECRET_KEY=" + "q8Vz2LmP0xRt7Ns4",
        "-----BEGIN EC PRIVATE KEY-----\\n" + "MHcCAQEEIAbcdefghij0123456789ABCDEFGHIJ" +
        "\\n-----END EC PRIVATE KEY-----",
    ]
    for index, rule in enumerate([*library_rules(), *agent_log_rules()]):
        alone = Redactor((rule,))
        assert any(alone.findings(s) for s in samples), (index, rule.kind, rule.pattern.pattern)


def test_json_escaped_private_key_blocks_are_redacted_whole() -> None:
    body = "\\n".join("MIIEow" + "Ab1" * 20 for _ in range(4))
    text = '{"content": "-----BEGIN RSA PRIVATE KEY-----\\n' + body + \
           '\\n-----END RSA PRIVATE KEY-----\\n"}'
    out = REDACTOR.redact_text(text)
    assert "Ab1Ab1" not in out and out.count(marker("private-key")) == 1
    # a block cut short (no END line) is redacted to its last base64 line
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "b3BlbnNzaC1rZXktdjEAAAAA" * 3 + "\n"
    assert "b3Blbn" not in REDACTOR.redact_text(cut)


def test_code_heavy_corpus_has_no_redaction() -> None:
    texts = code_corpus()
    found = Counter(f.kind for t in texts for f in REDACTOR.findings(t))
    print(f"\nfalse positives in the generated code corpus ({len(texts)} texts, "
          f"{sum(map(len, texts))} chars): {dict(found) or 0}")
    assert found == Counter()


def test_non_secrets_stay_as_they_are() -> None:
    keep = [
        "3f2a9c1e5b7d4f6a8c0e2b4d6f8a0c2e4b6d8f0a",  # git SHA
        "123e4567-e89b-12d3-a456-426614174000",  # UUID
        "sha512-" + "z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==",
        "h1:" + "2wq5ELP5iwDhtSGF+Uj0KOIRWCGVm7pXDovuTG4kXYQ=",
        'checksum = "' + "a" * 10 + "0123456789abcdef" * 3 + '"',
        "api_key = os.environ['OPENAI_API_KEY']", "password: str = Field(default='')",
        "MAX_TOKENS=4096", "TOKENIZERS_PARALLELISM=false", "API_KEY=${API_KEY}",
        'curl -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com',
        "postgres://user:password@localhost:5432/db", "AKIAIOSFODNN7EXAMPLE",
        "toolu_01ABCDEFGHIJKLMNOPQRSTUV", "msg_01XYZabcdefghijklmnopq",
        "private_key: Ed25519PrivateKey | None = None",
    ]
    for text in keep:
        assert REDACTOR.redact_text(text) == text, text


def _real_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for path in sorted(DATA.rglob("*")):
        if not path.is_file() or path.name == "README.md":
            continue
        fmt = detect_format(path, path.read_bytes()[:4096])
        if fmt is not None:
            for session in IMPORTERS[fmt](path.read_bytes(), str(path)):
                events.extend(session.events)
    return events


def test_real_agent_logs_redact_only_their_one_database_url_password() -> None:
    # The one credential in the real logs: the Crush session's database URL
    # (postgres://postgres:<password>@localhost), shown three times; nothing else is a secret.
    events = _real_events()
    assert len(events) > 1000
    counts: Counter[str] = Counter()
    for event in events:
        out, found = REDACTOR.redact_event(event, orjson.dumps(event))
        counts.update(found)
        assert (out is event) == (not found)
    print(f"\nredactions in the real logs of tests/data ({len(events)} events): "
          f"{dict(counts) or 0}")
    assert counts == Counter({"basic-auth": 3})


def test_a_secret_planted_in_a_real_log_is_found() -> None:
    token = next(p for p in planted_secrets() if p.kind == "github-token")
    event = next(e for e in _real_events() if e["type"] == "tool/result")
    planted = orjson.loads(orjson.dumps(event).replace(b'"content":"', b'"content":"'
                                                       + token.value.encode() + b" ", 1))
    out, counts = REDACTOR.redact_event(planted, orjson.dumps(planted))
    assert counts == {"github-token": 1} and token.value not in orjson.dumps(out).decode()


def test_settings_switch_extend_and_allow() -> None:
    assert build_redactor(Settings(redact=False)) is NO_REDACTION
    assert build_redactor(Settings()).fingerprint == REDACTOR.fingerprint
    custom = build_redactor(Settings(redact_patterns={"ticket": r"TCK-(\d{6})"},
                                     redact_allow=[r"AKIA[A-Z0-9]{16}"]))
    aws = "AK" + "IA" + "Q3ZXPLM2NRT7VBC4"
    assert custom.redact_text(f"TCK-123456 {aws}") == f"TCK-{marker('ticket')} {aws}"
    assert custom.fingerprint != REDACTOR.fingerprint
    with pytest.raises(ConfigError, match="kind"):
        make_redactor({"Not A Kind": "x"})
    with pytest.raises(ConfigError, match="regular expression"):
        make_redactor({"ok": "("})
    with pytest.raises(ConfigError, match="RECALL_REDACT_ALLOW"):
        make_redactor(allow=["("])


def test_detect_secrets_pattern_counts_are_what_the_catalogue_expects() -> None:
    # A new detect-secrets release that adds or drops patterns fails here, not silently.
    rules = library_rules()
    assert len(rules) == 24
    assert all(r.origin.startswith("detect-secrets:") for r in rules)
    assert all(isinstance(r.pattern, re.Pattern) for r in rules)
