"""Transport: how every Kafka client of ours connects — the one place the RECALL_KAFKA_* security
settings become aiokafka keyword arguments and faust broker credentials, and the one mapping of
a refused connection (authentication, TLS, a missing ACL) to a STREAM_* error that says which.

Every aiokafka client is built as `AIOKafkaX(**connect_kwargs(conn), ...)`, `conn` being
`client_options(settings)` (bootstrap list plus security) or, for tests and tools on a plaintext
broker, a bare bootstrap string.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from aiokafka.errors import KafkaError

from projections.errors import (
    STREAM_AUTH_FAILED,
    STREAM_NOT_AUTHORIZED,
    STREAM_TLS_FAILED,
    ConfigError,
    RecallError,
)
from streams.core.settings import Settings
from streams.runtime.kafka import seam
from streams.runtime.kafka.brokers import bootstrap_servers

#: A bootstrap string (plaintext) or the keyword arguments `client_options` builds.
Connect = str | Mapping[str, Any]
#: How often an idle long-lived consumer's loops turn (kept beside the seam's other waits).
IDLE_TURN_MS = seam.IDLE_TURN_MS
#: The request path's consumers (a requester's reply consumer, the query role's request
#: consumer, the index role's consumer) refresh their metadata this often (aiokafka's
#: default: every 5 min): a broker that stalls (a long pause, SIGSTOP) keeps its connections
#: open and answers nothing, so no error tells the clients that its leaderships moved; the
#: first metadata after the controller fenced it does, and every client of the process lets go
#: of it (streams.runtime.kafka.seam, 10). One small request a second per such consumer.
FOLLOW_LEADERS: dict[str, Any] = {"metadata_max_age_ms": 1000}
#: How long a role's start-up (its topics, the lineup) is asked again while a broker is lost: an
#: admin request goes to any broker, a dead one too until the controller fences it, and the
#: whole role would otherwise exit and be restarted (its imports and clients over again).
SET_UP_RETRY_S = 60.0
#: The pause between two attempts.
SET_UP_PAUSE_S = 0.5

log = logging.getLogger("recall.connection")
_T = TypeVar("_T")

_TLS = ("SSL", "SASL_SSL")
_TLS_FILES = {"cafile": "RECALL_KAFKA_SSL_CAFILE", "certfile": "RECALL_KAFKA_SSL_CERTFILE",
              "keyfile": "RECALL_KAFKA_SSL_KEYFILE"}
_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TOPIC_AUTHORIZATION_FAILED = 29


class KafkaAuthFailed(RecallError):
    """The brokers refused the SASL login (unknown user, wrong password or mechanism)."""

    code = STREAM_AUTH_FAILED
    hint = ("check RECALL_KAFKA_SASL_USERNAME, RECALL_KAFKA_SASL_PASSWORD and "
            "RECALL_KAFKA_SASL_MECHANISM against the cluster's users")


class KafkaTLSFailed(RecallError):
    """The TLS handshake failed: the broker's certificate is not trusted or does not name it."""

    code = STREAM_TLS_FAILED
    hint = ("check RECALL_KAFKA_SSL_CAFILE (the CA that signed the brokers' certificates) and "
            "that RECALL_BROKER names a host the certificate lists")


class KafkaNotAuthorized(RecallError):
    """The principal lacks an ACL for what it tried (a topic, a consumer group, the cluster)."""

    code = STREAM_NOT_AUTHORIZED


async def asked_again(what: str, attempt: Callable[[], Awaitable[_T]],
                      within_s: float = SET_UP_RETRY_S) -> _T:
    """`attempt()`'s answer, asked again every `SET_UP_PAUSE_S` while it fails with an error
    asking again can mend (aiokafka's retriable ones: a lost broker, a leader or the controller
    moving: `topics.ensure_topics` raises those a CreateTopics answer names), for up to
    `within_s`; any other error, or the last one, is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        try:
            return await attempt()
        except KafkaError as exc:
            if not exc.retriable or loop.time() >= deadline:
                raise
            log.warning("%s failed with %r, an error Kafka answers while a broker is lost or "
                        "a leader or the controller moves: retrying it every %g s for up to "
                        "%.0f s more, then giving up with the last error", what, exc,
                        SET_UP_PAUSE_S, deadline - loop.time())
        await asyncio.sleep(SET_UP_PAUSE_S)


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of SSL / SASL_SSL (None otherwise); a missing file is a ConfigError."""
    if settings.kafka_security_protocol not in _TLS:
        return None
    for name, variable in _TLS_FILES.items():
        path = getattr(settings, f"kafka_ssl_{name}")
        if path is not None and not path.is_file():
            raise ConfigError(f"{variable}: {path} is not a readable file")
    if (settings.kafka_ssl_certfile is None) != (settings.kafka_ssl_keyfile is None):
        raise ConfigError("RECALL_KAFKA_SSL_CERTFILE and RECALL_KAFKA_SSL_KEYFILE go together "
                          "(a client certificate needs its key)")
    try:
        context = ssl.create_default_context(
            cafile=None if settings.kafka_ssl_cafile is None else str(settings.kafka_ssl_cafile))
        context.check_hostname = settings.kafka_ssl_check_hostname
        if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
            password = settings.kafka_ssl_key_password
            context.load_cert_chain(str(settings.kafka_ssl_certfile),
                                    str(settings.kafka_ssl_keyfile),
                                    None if password is None else password.get_secret_value())
    except (ssl.SSLError, ValueError) as exc:
        # the message names the file's problem (not PEM, key mismatch), never the passphrase
        raise ConfigError(f"RECALL_KAFKA_SSL_*: the TLS files could not be loaded: "
                          f"{exc.__class__.__name__}: {getattr(exc, 'reason', None) or exc}"
                          ) from None
    return context


def security_options(settings: Settings) -> dict[str, Any]:
    """aiokafka's security keyword arguments for these settings."""
    protocol = settings.kafka_security_protocol
    options: dict[str, Any] = {"security_protocol": protocol}
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if protocol in _SASL:
        if not settings.kafka_sasl_username or settings.kafka_sasl_password is None:
            raise ConfigError(f"RECALL_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                              "RECALL_KAFKA_SASL_USERNAME and RECALL_KAFKA_SASL_PASSWORD")
        options.update(sasl_mechanism=settings.kafka_sasl_mechanism,
                       sasl_plain_username=settings.kafka_sasl_username,
                       sasl_plain_password=settings.kafka_sasl_password.get_secret_value())
    return options


def client_options(settings: Settings) -> dict[str, Any]:
    """`bootstrap_servers` and the security keyword arguments of every aiokafka client."""
    if not settings.broker:
        raise RecallError("the Kafka runtime needs RECALL_BROKER (e.g. kafka://127.0.0.1:9092)",
                          code="STREAM_NO_BROKER")
    return {"bootstrap_servers": bootstrap_servers(settings.broker), **security_options(settings)}


def connect_kwargs(conn: Connect) -> dict[str, Any]:
    """Keyword arguments for an aiokafka client from `client_options(...)` or a bare bootstrap."""
    return {"bootstrap_servers": conn} if isinstance(conn, str) else dict(conn)


def bootstrap_of(conn: Connect) -> str:
    return conn if isinstance(conn, str) else str(conn["bootstrap_servers"])


def faust_broker(settings: Settings) -> dict[str, Any]:
    """faust's `broker` (every bootstrap host) and `broker_credentials` for these settings."""
    from faust.auth import SASLCredentials, SSLCredentials

    hosts = bootstrap_servers(str(settings.broker)).split(",")
    options: dict[str, Any] = {"broker": ";".join(f"kafka://{host}" for host in hosts)}
    protocol = settings.kafka_security_protocol
    if protocol in _SASL:
        sasl = security_options(settings)
        options["broker_credentials"] = SASLCredentials(
            username=sasl["sasl_plain_username"], password=sasl["sasl_plain_password"],
            ssl_context=sasl.get("ssl_context"), mechanism=sasl["sasl_mechanism"])
    elif protocol == "SSL":
        options["broker_credentials"] = SSLCredentials(ssl_context(settings))
    return options


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def explain(exc: BaseException) -> RecallError | None:
    """The STREAM_* error a refused connection or request amounts to, or None if `exc` is not
    one. Never includes a password: aiokafka's messages carry none."""
    from aiokafka import errors

    for link in _chain(exc):
        if isinstance(link, KafkaAuthFailed | KafkaTLSFailed | KafkaNotAuthorized):
            return link
        if isinstance(link, errors.SaslAuthenticationFailed | errors.AuthenticationFailedError
                      | errors.UnsupportedSaslMechanismError | errors.IllegalSaslStateError):
            return KafkaAuthFailed(f"the brokers refused the SASL login: {_message(link)}")
        if isinstance(link, ssl.SSLCertVerificationError):
            return KafkaTLSFailed("the broker's TLS certificate was not accepted: "
                                  f"{link.verify_message or link.reason}")
        if isinstance(link, ssl.SSLError):
            return KafkaTLSFailed(f"the TLS handshake with the broker failed: {link.reason}")
        if isinstance(link, errors.TopicAuthorizationFailedError):
            return KafkaNotAuthorized(f"not authorized for topic(s) {_message(link)}",
                                      hint="the principal needs an ACL on that topic "
                                      "(docs/kafka.md lists each role's)")
        if isinstance(link, errors.GroupAuthorizationFailedError):
            return KafkaNotAuthorized(f"not authorized for consumer group {_message(link)}",
                                      hint="the principal needs a READ ACL on that group")
        if isinstance(link, errors.ClusterAuthorizationFailedError
                      | errors.TransactionalIdAuthorizationFailed):
            return KafkaNotAuthorized(f"not authorized on the cluster: {_message(link)}",
                                      hint="the principal needs that cluster ACL")
    return None


def _message(exc: BaseException) -> str:
    """aiokafka's own words: its broker errors carry the topic or group as their argument."""
    text = ", ".join(str(arg) for arg in exc.args) or str(exc)
    return text.strip() or exc.__class__.__name__


async def diagnose(conn: Connect, topics: Sequence[str] = (),
                   timeout_s: float = 10.0) -> RecallError | None:
    """Why the brokers cannot be used with `conn`, when aiokafka only says "unable to
    bootstrap" or keeps retrying (it logs the cause and drops it): one connection to the first
    host, TLS handshake and SASL login included, then whether the principal may see `topics`."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.conn import create_conn

    kwargs = connect_kwargs(conn)
    host, _, port = bootstrap_of(conn).split(",")[0].strip().rpartition(":")
    options = {k: kwargs[k] for k in ("ssl_context", "security_protocol", "sasl_mechanism",
                                      "sasl_plain_username", "sasl_plain_password")
               if k in kwargs}
    try:
        connection = await asyncio.wait_for(create_conn(
            host, int(port), request_timeout_ms=int(timeout_s * 1000), **options), timeout_s)
    except (Exception, TimeoutError) as exc:
        return explain(exc)
    connection.close()
    if not topics:
        return None
    admin = AIOKafkaAdminClient(**kwargs, request_timeout_ms=int(timeout_s * 1000))
    try:
        await admin.start()
        access = await seam.topic_access(admin, topics)
    except Exception as exc:  # nothing more to learn: the caller reports its own error
        return explain(exc)
    finally:
        await admin.close()
    denied = [topic for topic, code in access.items() if code == _TOPIC_AUTHORIZATION_FAILED]
    if denied:
        return KafkaNotAuthorized(f"not authorized for topic(s) {', '.join(denied)}",
                                  hint="the principal needs an ACL on that topic "
                                  "(docs/kafka.md lists each role's)")
    return None


async def explained(conn: Connect, exc: BaseException,
                    topics: Sequence[str] = ()) -> BaseException:
    """`exc` as the STREAM_* error it amounts to, else `exc` itself. When aiokafka lost the
    cause (a failed bootstrap) or kept retrying until a timeout, the brokers are probed for it:
    the connection, then `topics` (the ones the failed step used)."""
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    found = explain(exc)
    if found is not None:
        return found
    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError | TimeoutError) \
            and not isinstance(conn, str):
        probed = await diagnose(conn, topics)
        if probed is not None:
            return probed
    return exc
