"""Test support: Apache Kafka KRaft brokers started from the test session, on free 127.0.0.1 ports.

The broker's jars come from Maven Central through `make kafka` (docker/kafka/fetch.sh: the
version is docker/kafka/pom.xml's `kafka.version`), cached outside the repo; nothing is fetched
here. Each node runs in combined mode (process.roles=broker,controller) as
`java -cp "<cache>/libs/*" kafka.Kafka server.properties` after `kafka.tools.StorageTool format`;
N nodes form one cluster with a static controller quorum (1 for the suite; 3 with replication
factor 3 and min.insync.replicas 2 for failover tests). A missing Java or broker raises
`ApacheKafkaUnavailable`, whose message names `make kafka`: the suite fails, it never skips.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "docker" / "kafka" / "pom.xml"
#: Java the broker needs (Kafka 4 brokers run on Java 17 or later).
MIN_JAVA = 17
#: Seconds a cluster gets to answer a metadata request listing every node.
START_TIMEOUT_S = 90.0
#: Each node's heap; the suite's single node keeps well under it.
HEAP = "512m"
#: Fast start on two cores: one GC thread, no C2 compiler (the broker idles most of the suite).
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
             "-Djava.awt.headless=true")
#: The broker's log: INFO to stdout (the node's log file), without the config dumps.
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
"""


class ApacheKafkaUnavailable(RuntimeError):
    """Java or the cached broker is missing: the message says what to run."""


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if match is None:
        raise ApacheKafkaUnavailable(f"no <kafka.version> in {POM}")
    return match.group(1).strip()


def cache_dir() -> Path:
    """Where docker/kafka/fetch.sh puts the broker (RECALL_KAFKA_CACHE overrides it)."""
    if os.environ.get("RECALL_KAFKA_CACHE"):
        return Path(os.environ["RECALL_KAFKA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "session-recall" / f"kafka-{kafka_version()}"


def classpath() -> str:
    libs = cache_dir() / "libs"
    if not (libs / ".complete").is_file() or not (libs / f"kafka_2.13-{kafka_version()}.jar").is_file():
        raise ApacheKafkaUnavailable(
            f"Apache Kafka {kafka_version()} is not in {libs}: run `make kafka` (Maven fetches "
            "it once into that cache), or pick another broker with RECALL_TEST_BROKER=noida")
    return f"{libs}/*"


def java() -> str:
    """The `java` to run the broker with (JAVA_HOME's, else PATH's), at least MIN_JAVA."""
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").is_file() \
        else shutil.which("java")
    if path is None:
        raise ApacheKafkaUnavailable(
            f"no `java` found (JAVA_HOME or PATH): the Apache Kafka broker needs Java >= {MIN_JAVA} "
            "(Debian: apt-get install default-jre-headless; `make kafka` checks it too), or pick "
            "another broker with RECALL_TEST_BROKER=noida")
    out = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=30).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if match and major == 1 and match.group(2):  # "1.8.0_x"
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise ApacheKafkaUnavailable(f"{path} is Java {major or '?'}; Apache Kafka "
                                     f"{kafka_version()} needs >= {MIN_JAVA}: {out.strip()[:200]}")
    return path


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _cluster_id() -> str:
    """A cluster id as Kafka writes one (Uuid: 16 random bytes, URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


#: prctl(2) option: the signal the kernel sends this process when its parent dies.
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn making the node's JVM get SIGKILL when the test process dies: the node runs
    in a session of its own (so a Ctrl-C aimed at pytest does not reach it), so a killed pytest
    would otherwise leave it running, holding its ports and a core. Linux only (elsewhere None).
    The kernel ties this to the forking *thread*: only the main thread, which lives as long as
    the test process, gets it (a node spawned from another thread would die with that thread)."""
    if (not sys.platform.startswith("linux")
            or threading.current_thread() is not threading.main_thread()):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


@dataclass(slots=True)
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    config_path: Path
    log_path: Path
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    #: the address it listens on (another network namespace's, for fleet tests)
    host: str = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start (or restart, on the same data) this node's JVM; its output goes to its log."""
        assert not self.running(), f"node {self.node_id} is running"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_die_with_parent())

    def kill(self) -> None:
        """SIGKILL, as a crash: no controlled shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"


@dataclass(slots=True)
class KafkaCluster:
    """N combined broker+controller nodes; `bootstrap` lists every node."""

    nodes: list[KafkaNode]
    work_dir: Path
    cluster_id: str
    replication_factor: int
    min_insync_replicas: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The first node's JVM (what a single-node broker's user measures or signals)."""
        assert self.nodes[0].process is not None
        return self.nodes[0].process

    @property
    def log_path(self) -> Path:
        return self.nodes[0].log_path

    def log_tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- node {n.node_id} ({n.log_path}), exit code "
                         f"{None if n.process is None else n.process.poll()}:\n{n.log_tail(chars)}"
                         for n in self.nodes)

    def stop_node(self, index: int, *, grace_s: float = 15.0) -> None:
        _stop([self.nodes[index]], grace_s)

    def kill_node(self, index: int) -> None:
        self.nodes[index].kill()

    def pause_node(self, index: int) -> None:
        """SIGSTOP: the node stalls (no heartbeats, no replies) until `resume_node`."""
        process = self.nodes[index].process
        assert process is not None and process.poll() is None
        process.send_signal(signal.SIGSTOP)

    def resume_node(self, index: int) -> None:
        process = self.nodes[index].process
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def restart_node(self, index: int) -> None:
        """Start a stopped or killed node again on its data; returns once it was spawned (wait
        with `wait_ready` for the cluster to list it)."""
        self.nodes[index].spawn()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until metadata from any running node lists every running node, or raise with logs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if n.process is not None and n.process.poll() is not None]
            if dead and len(dead) == len([n for n in self.nodes if n.process is not None]):
                break
            running = [n for n in self.nodes if n.running()]
            # a plain connect first: aiokafka logs every refused connection
            if running and all(_listening(n.host, n.port) for n in running) and asyncio.run(
                    _brokers_listed(",".join(n.bootstrap for n in running))) >= {
                    n.node_id for n in running}:
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"Apache Kafka {kafka_version()} ({len(self.nodes)} node(s), {self.work_dir}) did not "
            f"list every running node in its metadata within {timeout_s:.0f} s; logs:\n"
            f"{self.log_tails()}")


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


async def _brokers_listed(bootstrap: str) -> set[int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        return {int(b["node_id"]) for b in cluster["brokers"]}
    except Exception:
        return set()
    finally:
        await admin.close()


def server_properties(node_id: int, ports: Mapping[int, tuple[int, int]], data_dir: Path, *,
                      replication_factor: int, min_insync_replicas: int,
                      extra: Mapping[str, str] = {}, host: str = "127.0.0.1") -> dict[str, str]:
    """One node's server.properties: `ports` maps every node id to (client port, controller port);
    every node listens on `host`."""
    port, controller_port = ports[node_id]
    voters = ",".join(f"{nid}@{host}:{cport}" for nid, (_, cport) in sorted(ports.items()))
    rf, isr = str(replication_factor), str(min_insync_replicas)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # internal topics fit the cluster; fewer partitions than the defaults (50) start faster
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        # a group's first join is not held back 3 s; tests may use sessions under the 6 s floor
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        # small JVM: the log cleaner's dedupe buffer is 128 MB by default
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    props.update(extra)
    return props


def start_cluster(work_dir: Path, nodes: int = 1, *, replication_factor: int | None = None,
                  min_insync_replicas: int | None = None, extra: Mapping[str, str] | None = None,
                  heap: str = HEAP, host: str = "127.0.0.1",
                  wrap: Sequence[str] = ()) -> KafkaCluster:
    """Format and start `nodes` KRaft nodes under `work_dir`; return once metadata lists all of
    them. Replication factor defaults to min(nodes, 3), min.insync.replicas to RF - 1 (>= 1).
    `host`: the address every node listens on; `wrap`: a prefix of each node's command (e.g.
    `ip netns exec <ns>`, which execs java in place: the node's pid is the JVM's).
    Raises ApacheKafkaUnavailable (no Java, no cached broker) or RuntimeError (did not start)."""
    java_bin, cp = java(), classpath()
    rf = replication_factor or min(nodes, 3)
    isr = min_insync_replicas or max(1, rf - 1)
    if not 1 <= isr <= rf <= nodes:
        raise ValueError(f"need 1 <= min.insync.replicas ({isr}) <= RF ({rf}) <= nodes ({nodes})")
    work_dir.mkdir(parents=True, exist_ok=True)
    log4j = work_dir / "log4j2.properties"
    log4j.write_text(LOG4J2)
    free = _free_ports(2 * nodes)
    ports = {i + 1: (free[2 * i], free[2 * i + 1]) for i in range(nodes)}
    jvm = [java_bin, f"-Xmx{heap}", *JVM_FLAGS, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
    cluster = KafkaCluster([], work_dir, _cluster_id(), rf, isr, dict(extra or {}))
    for node_id in ports:
        data_dir = work_dir / f"node-{node_id}"
        props = server_properties(node_id, ports, data_dir, replication_factor=rf,
                                  min_insync_replicas=isr, extra=cluster.extra, host=host)
        config = work_dir / f"node-{node_id}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        node = KafkaNode(node_id, ports[node_id][0], ports[node_id][1], config,
                         work_dir / f"node-{node_id}.log",
                         [*wrap, *jvm, "kafka.Kafka", str(config)], host=host)
        fmt = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster.cluster_id}",
                              "-c", str(config)], capture_output=True, timeout=120)
        node.log_path.write_bytes(fmt.stdout + fmt.stderr)
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting node {node_id}'s storage failed (exit "
                               f"{fmt.returncode}):\n{node.log_tail()}")
        cluster.nodes.append(node)
    for node in cluster.nodes:
        node.spawn()
    try:
        cluster.wait_ready()
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _stop(nodes: list[KafkaNode], grace_s: float) -> None:
    live = [n for n in nodes if n.running()]
    for node in live:
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for node in live:
        assert node.process is not None
        try:
            node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.kill()


def stop_cluster(cluster: KafkaCluster, *, grace_s: float = 15.0) -> None:
    """SIGTERM every node (a controlled shutdown), SIGKILL what still runs after `grace_s`."""
    _stop(cluster.nodes, grace_s)
