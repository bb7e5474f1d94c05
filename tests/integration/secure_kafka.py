"""Test support: one Apache Kafka node with a SASL_SSL listener (SCRAM-SHA-512 users created at
format time, a certificate for 127.0.0.1/localhost signed by a CA the test makes) and ACLs
enforced by the StandardAuthorizer.

Reuses tests/integration/apache_kafka.py (Java, the cached broker, its server properties and
process handling); only the listener set, the format step's `--add-scram` and the certificates
are added here. The PLAINTEXT listener and the controller listener stay on loopback for the
node's own use (its principal, ANONYMOUS, is a super user as the node must be); every client of
the tests connects to the SASL_SSL port.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.apache_kafka import (
    JVM_FLAGS,
    LOG4J2,
    KafkaCluster,
    KafkaNode,
    _cluster_id,
    _free_ports,
    classpath,
    java,
    server_properties,
)

MECHANISM = "SCRAM-SHA-512"

# Kafka's ACL enums (org.apache.kafka.common.resource / acl), as the CreateAcls request carries them
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE, ALL = 3, 4, 5, 8, 10, 12, 2
ALLOW = 3


@dataclass(frozen=True, slots=True)
class Certificates:
    ca: Path  # the CA the broker's certificate chains to (PEM)
    other_ca: Path  # a CA that signed nothing the broker shows
    broker_pem: Path  # the broker's key and certificate chain (PEM keystore)


@dataclass(slots=True)
class SecureKafka:
    cluster: KafkaCluster
    sasl_port: int
    certs: Certificates
    users: dict[str, str]

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.sasl_port}"

    @property
    def log_path(self) -> Path:
        return self.cluster.log_path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {done.stderr[-2000:]}")


def make_certificates(work: Path) -> Certificates:
    """A CA, a second unrelated CA, and a broker certificate for 127.0.0.1 and localhost."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=recall test {name}",
                 cwd=work)
    (work / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=work)
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", "broker.crt", "-extfile", "broker.ext",
             cwd=work)
    # Kafka's PEM keystore wants a PKCS#8 key followed by the certificate chain
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.p8", cwd=work)
    pem = work / "broker.pem"
    pem.write_text((work / "broker.p8").read_text() + (work / "broker.crt").read_text()
                   + (work / "ca.pem").read_text())
    return Certificates(work / "ca.pem", work / "other-ca.pem", pem)


def start_secure_kafka(work: Path, users: dict[str, str]) -> SecureKafka:
    """One KRaft node: PLAINTEXT (the node's own), SASL_SSL with SCRAM-SHA-512 `users` (name →
    password, created at format time; `admin` is the super user), StandardAuthorizer."""
    java_bin, cp = java(), classpath()
    certs = make_certificates(work / "certs")
    log4j = work / "log4j2.properties"
    log4j.write_text(LOG4J2)
    port, controller_port, sasl_port = _free_ports(3)
    data_dir = work / "node-1"
    props = server_properties(1, {1: (port, controller_port)}, data_dir, replication_factor=1,
                              min_insync_replicas=1)
    props.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},"
                     f"CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker_pem),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    })
    work.mkdir(parents=True, exist_ok=True)
    config = work / "node-1.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    jvm = [java_bin, "-Xmx512m", *JVM_FLAGS, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
    cluster = KafkaCluster([], work, _cluster_id(), 1, 1, {})
    node = KafkaNode(1, port, controller_port, config, work / "node-1.log",
                     [*jvm, "kafka.Kafka", str(config)])
    scram = [arg for name, password in users.items()
             for arg in ("--add-scram", f"{MECHANISM}=[name={name},password={password}]")]
    fmt = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "-t", cluster.cluster_id,
                          "-c", str(config), *scram], capture_output=True, timeout=120)
    node.log_path.write_bytes(fmt.stdout + fmt.stderr)
    if fmt.returncode != 0:
        raise RuntimeError(f"formatting the secured node failed (exit {fmt.returncode}):\n"
                           f"{node.log_tail()}")
    cluster.nodes.append(node)
    node.spawn()
    try:
        cluster.wait_ready()
    except BaseException:
        node.kill()
        raise
    return SecureKafka(cluster, sasl_port, certs, dict(users))


def add_acls(conn: dict[str, Any], acls: list[tuple[int, str, int, str, int]]) -> None:
    """(resource type, name, pattern type, principal, operation) → ALLOW ACLs, as `conn` (the
    super user's client options)."""
    asyncio.run(_add_acls(conn, acls))


async def _add_acls(conn: dict[str, Any], acls: list[tuple[int, str, int, str, int]]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.admin import CreateAclsRequest

    admin = AIOKafkaAdminClient(**conn)
    await admin.start()
    try:
        for resource, name, pattern, principal, operation in acls:
            response = await admin._send_request(CreateAclsRequest(
                resource, name, pattern, principal, "*", operation, ALLOW))
            for code, message in response.creation_responses:
                if code:
                    raise RuntimeError(f"creating ACL {(resource, name, principal, operation)} "
                                       f"failed: error {code} {message}")
    finally:
        await admin.close()
