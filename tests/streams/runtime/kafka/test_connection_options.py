"""The RECALL_KAFKA_* settings become aiokafka's keyword arguments and faust's broker credentials
in one place; bad TLS/SASL settings are RECALL_CONFIG_INVALID naming the variable, and a
password is never shown (settings' repr, error messages) but reaches the role processes."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from faust.auth import SASLCredentials, SSLCredentials

from projections.errors import ConfigError
from streams.core.settings import Settings, handover_json
from streams.runtime.kafka.connection import client_options, connect_kwargs, faust_broker

PASSWORD = "s3cret-pass-word"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test ca"], cwd=work,
                   check=True, capture_output=True)
    return work / "ca.pem"


def secured(ca: Path, **more: object) -> Settings:
    fields: dict[str, object] = dict(
        broker="kafka://b1:9093,kafka://b2:9093", kafka_security_protocol="SASL_SSL",
        kafka_ssl_cafile=ca, kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="w",
        kafka_sasl_password=PASSWORD)
    fields.update(more)
    return Settings(**fields)  # type: ignore[arg-type]


def test_plaintext_is_the_bootstrap_list_alone() -> None:
    options = client_options(Settings(broker="kafka://h1:9092;kafka://h2:9092"))
    assert options == {"bootstrap_servers": "h1:9092,h2:9092", "security_protocol": "PLAINTEXT"}
    assert connect_kwargs("h:1") == {"bootstrap_servers": "h:1"}


def test_sasl_ssl_reaches_aiokafka_and_faust_alike(ca: Path) -> None:
    settings = secured(ca)
    options = client_options(settings)
    assert options["bootstrap_servers"] == "b1:9093,b2:9093"
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("w", PASSWORD)
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED

    faust = faust_broker(settings)
    assert faust["broker"] == "kafka://b1:9093;kafka://b2:9093"
    credentials = faust["broker_credentials"]
    assert isinstance(credentials, SASLCredentials)
    assert (credentials.username, credentials.password) == ("w", PASSWORD)
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_SSL"

    tls_only = faust_broker(secured(ca, kafka_security_protocol="SSL"))
    assert isinstance(tls_only["broker_credentials"], SSLCredentials)
    assert "sasl_mechanism" not in client_options(secured(ca, kafka_security_protocol="SSL"))


def test_hostname_check_can_be_turned_off(ca: Path) -> None:
    context = client_options(secured(ca, kafka_ssl_check_hostname=False))["ssl_context"]
    assert context.check_hostname is False


@pytest.mark.parametrize(("change", "named"), [
    ({"kafka_ssl_cafile": Path("/nonexistent/ca.pem")}, "RECALL_KAFKA_SSL_CAFILE"),
    ({"kafka_ssl_certfile": Path(__file__)}, "RECALL_KAFKA_SSL_CERTFILE"),
    ({"kafka_sasl_password": None}, "RECALL_KAFKA_SASL_PASSWORD"),
])
def test_incomplete_tls_or_sasl_settings_name_the_variable(
        ca: Path, change: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        client_options(secured(ca, **change))
    assert named in caught.value.message and caught.value.code == "RECALL_CONFIG_INVALID"


def test_a_file_that_is_not_pem_is_a_config_error(ca: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="RECALL_KAFKA_SSL"):
        client_options(secured(ca, kafka_ssl_cafile=bogus))


def test_the_password_is_never_shown_but_reaches_the_role_processes(ca: Path) -> None:
    settings = secured(ca)
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings)
    assert PASSWORD not in settings.model_dump_json()
    handed = Settings.model_validate_json(handover_json(settings))
    assert handed.kafka_sasl_password is not None
    assert handed.kafka_sasl_password.get_secret_value() == PASSWORD
    assert handed == settings
