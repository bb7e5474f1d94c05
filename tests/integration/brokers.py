"""Test support: start and stop a Kafka-protocol broker on loopback.

`apache` (the default, the reference broker): Apache Kafka in KRaft mode from the Maven cache
`make kafka` fills (tests/integration/apache_kafka.py); `noida`: noida-db, a Kafka-protocol
emulator from PyPI, the option for a machine without Java.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import ClassVar

from streams.core.settings import Settings
from tests.integration.apache_kafka import KafkaCluster, start_cluster, stop_cluster

BROKERS = ("apache", "noida")
DEFAULT_BROKER = "apache"
#: Seconds a broker gets to answer a metadata request before the suite fails.
START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Broker:
    """A running broker: its name, bootstrap address and the consumer settings it needs.
    `process` is the broker's process (an Apache Kafka cluster's: its first node's JVM)."""

    name: str
    bootstrap: str
    process: subprocess.Popen[bytes]
    log_path: Path
    cluster: KafkaCluster | None = None

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    #: The consumer session timeout and heartbeat every broker here gets: the settings'
    #: defaults (Kafka's default group.min.session.timeout.ms is 6 s and noida-db rejects < 6 s
    #: too; the suite's Kafka accepts >= 1 s, but runs what a default broker accepts).
    session_timeout_s: ClassVar[float] = Settings.model_fields["session_timeout_s"].default
    heartbeat_s: ClassVar[float] = Settings.model_fields["heartbeat_s"].default


def selected_brokers(value: str | None) -> list[str]:
    """RECALL_TEST_BROKER: apache (default), noida, or `apache,noida` / `all` (both)."""
    choice = (value or DEFAULT_BROKER).strip().lower()
    if choice == "all":
        return list(BROKERS)
    names = [name.strip() for name in choice.split(",") if name.strip()]
    if not names or any(name not in BROKERS for name in names):
        raise ValueError(f"RECALL_TEST_BROKER={value!r}: use apache, noida, apache,noida or all")
    return list(dict.fromkeys(names))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _noida_binary() -> Path:
    # The real binary, not the console-script wrapper: killing a wrapper would orphan it.
    path = Path(str(files("noida_db").joinpath("noida-db")))
    if not path.is_file():
        raise RuntimeError(f"the noida-db binary is not at {path}; install the test extra "
                           "(pip install -e '.[test]')")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def _noida_command(port: int, data_dir: Path) -> list[str]:
    return [str(_noida_binary()), "start", "--only", "kafka", "--kafka-port", str(port),
            "--host", "127.0.0.1", "--data-dir", str(data_dir)]


async def _answers_metadata(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    except Exception:
        return False
    finally:
        await admin.close()


def start_broker(name: str, work_dir: Path) -> Broker:
    """Start `name` on a free port; return once it answers a metadata request, or raise
    (RuntimeError with the log tail; for apache, ApacheKafkaUnavailable naming `make kafka`
    when Java or the cached broker is missing). RECALL_TEST_KAFKA_NODES=3 makes apache a
    three-node cluster (replication factor 3, min.insync.replicas 2)."""
    if name == "apache":
        nodes = int(os.environ.get("RECALL_TEST_KAFKA_NODES") or 1)
        cluster = start_cluster(work_dir / "apache", nodes)
        return Broker(name, cluster.bootstrap, cluster.process, cluster.log_path, cluster)
    port = free_port()
    data_dir = work_dir / f"{name}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(_noida_command(port, data_dir), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    broker = Broker(name, f"127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if asyncio.run(_answers_metadata(broker.bootstrap)):
            return broker
        time.sleep(0.2)
    stop_broker(broker)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{name} broker did not answer a metadata request on {broker.bootstrap} "
                       f"within {START_TIMEOUT_S:.0f} s (exit code {process.poll()}); log tail:\n"
                       f"{tail}")


def stop_broker(broker: Broker, *, grace_s: float = 5.0) -> None:
    """SIGINT (noida ignores SIGTERM), then SIGKILL after `grace_s`; an Apache Kafka cluster:
    SIGTERM (a controlled shutdown), then SIGKILL after 15 s."""
    if broker.cluster is not None:
        stop_cluster(broker.cluster)
        return
    process = broker.process
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
