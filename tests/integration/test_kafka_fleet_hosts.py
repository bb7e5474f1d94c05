"""Integration (chaos): a fleet of hosts on network namespaces.

As root, the test makes a private network that exists only inside this machine: a switch
namespace holding a bridge, and one namespace per host joined to it by a veth pair — three agent
hosts, a worker host and the cluster host (three Apache Kafka nodes listening on its address),
all in one /24 of 10.231.0.0/16 that no interface of the machine used before. The test process
itself joins the bridge too (one more veth, the query client's host): every packet goes between
addresses of namespaces the test made. Each agent host runs `recall watch` shipping to the
events topic while an agent-like writer appends to its logs; one agent host's link is cut for
60 s while its writer keeps going, then restored: everything it wrote arrives exactly once, in
order per session. The cross-host watch → searchable latency is measured (p50/p99 printed).
Every namespace is deleted at the end, whatever happened.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from factories import header, user

from streams.core.settings import Settings
from streams.facade import Recall
from streams.runtime.kafka.codec import split_segment
from streams.runtime.kafka.topics import Topics
from tests.integration.apache_kafka import KafkaCluster, start_cluster, stop_cluster
from tests.integration.brokers import Broker
from tests.integration.kafkaio import REPO, WorkerProcess, _spawn, read_topic, worker_env

pytestmark = [pytest.mark.kafka, pytest.mark.chaos, pytest.mark.cluster,
              pytest.mark.timeout(900)]

AGENTS = ("a1", "a2", "a3")
SESSIONS_PER_AGENT = 2
#: Seconds between two lines of one session (each agent host writes its sessions in turn).
LINE_EVERY_S = 0.25
WARM_S, CUT_S, AFTER_S = 20.0, 60.0, 10.0
SHARDS = 4
#: The runtime creates every topic itself (partitions = shards, retention, compaction, RF). With
#: the broker's default auto-creation on, a metadata request for a topic not made yet (a worker
#: and a client starting together on three nodes) created the events topic with 1 partition and
#: the broker's defaults, and both failed with STREAM_TOPIC_SETUP.
NO_AUTO_CREATE = {"auto.create.topics.enable": "false"}
#: The test fails above this p99 (the bench goal is 1 s; a shared 2-core machine runs the three
#: JVMs, the worker's processes, three watchers and the writers at once).
P99_BOUND_MS = 5000.0


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed (exit {done.returncode}): "
                           f"{done.stderr.strip()}")
    return done


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that no route of this machine's namespace touches."""
    routes = _ip("-4", "route", "show", "table", "all").stdout
    used = [ipaddress.ip_network(word, strict=False) for word in routes.split()
            if word[0].isdigit() and "/" in word]
    used += [ipaddress.ip_network(word, strict=False) for word in
             _ip("-4", "-o", "addr").stdout.split() if word[0].isdigit() and "/" in word]
    start = os.getpid() % 200
    for n in itertools.chain(range(start, 250), range(start)):
        net = ipaddress.ip_network(f"10.231.{n}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 10.231.0.0/16")


class Fleet:
    """The namespaces, the bridge and the addresses; `close()` deletes all of it."""

    HOSTS = ("cl", "wk", *AGENTS)

    def __init__(self) -> None:
        self.tag = f"rc{os.getpid() % 100000}"
        self.net = _free_subnet()
        base = int(self.net.network_address)
        self.address = {"root": str(ipaddress.ip_address(base + 1)),
                        "cl": str(ipaddress.ip_address(base + 10)),
                        "wk": str(ipaddress.ip_address(base + 20)),
                        **{a: str(ipaddress.ip_address(base + 31 + i))
                           for i, a in enumerate(AGENTS)}}
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def port(self, host: str) -> str:
        """The switch-side end of `host`'s link (what a cut takes down)."""
        return f"{self.tag}{host}s"

    def wrap(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host)]

    def open(self) -> None:
        switch = self.ns("sw")
        for name in (switch, *(self.ns(h) for h in self.HOSTS)):
            _ip("netns", "add", name)
            self.made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        prefix = self.net.prefixlen
        for host in self.HOSTS:
            inside = f"{self.tag}{host}h"
            _ip("link", "add", inside, "type", "veth", "peer", "name", self.port(host))
            _ip("link", "set", inside, "netns", self.ns(host))
            _ip("link", "set", self.port(host), "netns", switch)
            _ip("-n", switch, "link", "set", self.port(host), "master", "br0", "up")
            _ip("-n", self.ns(host), "addr", "add", f"{self.address[host]}/{prefix}", "dev",
                inside)
            _ip("-n", self.ns(host), "link", "set", inside, "up")
        # the test process's own link (the query client's host); deleting the switch namespace
        # deletes its peer, and with it this end
        root = f"{self.tag}rt"
        _ip("link", "add", root, "type", "veth", "peer", "name", self.port("root"))
        self.made.append(root)
        _ip("link", "set", self.port("root"), "netns", switch)
        _ip("-n", switch, "link", "set", self.port("root"), "master", "br0", "up")
        _ip("addr", "add", f"{self.address['root']}/{prefix}", "dev", root)
        _ip("link", "set", root, "up")

    def cut(self, host: str) -> None:
        _ip("-n", self.ns("sw"), "link", "set", self.port(host), "down")

    def restore(self, host: str) -> None:
        _ip("-n", self.ns("sw"), "link", "set", self.port(host), "up")

    def close(self) -> list[str]:
        """Delete everything made (best effort, every step tried); return what failed."""
        problems = []
        for name in reversed(self.made):
            args = (["link", "del", name] if name.endswith("rt") else ["netns", "del", name])
            done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
            if done.returncode != 0 and "Cannot find device" not in done.stderr:
                problems.append(f"ip {' '.join(args)}: {done.stderr.strip()}")
        return problems


@pytest.fixture(scope="module")
def hosts() -> Iterator[Fleet]:
    fleet = Fleet()
    try:
        fleet.open()
    except RuntimeError as exc:
        problems = fleet.close()
        pytest.fail(f"network namespaces could not be made here: {exc} {problems}",
                    pytrace=False)
    try:
        yield fleet
    finally:
        problems = fleet.close()
        left = {n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                          text=True).stdout.split() if n.startswith(fleet.tag)}
        assert not problems and not left, (problems, left)


@pytest.fixture(scope="module")
def cluster(hosts: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    work = tmp_path_factory.mktemp("fleet-cluster")
    try:
        running = start_cluster(work / "apache", 3, replication_factor=3, min_insync_replicas=2,
                                extra=NO_AUTO_CREATE,
                                host=hosts.address["cl"], wrap=hosts.wrap("cl"))
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield running
    finally:
        stop_cluster(running)


class _Writer(threading.Thread):
    """An agent: appends its sessions' lines in turn, one every LINE_EVERY_S / sessions, and
    records when each line was written."""

    def __init__(self, agent: str, folder: Path) -> None:
        super().__init__(daemon=True)
        self.agent, self.folder = agent, folder
        self.sessions = [f"{agent}-s{k}" for k in range(SESSIONS_PER_AGENT)]
        self.written: dict[str, list[tuple[float, str]]] = {s: [] for s in self.sessions}
        self.done = threading.Event()
        folder.mkdir(parents=True)
        for n, sid in enumerate(self.sessions):
            (folder / f"{sid}.jsonl").write_bytes(
                orjson.dumps(header(sid, cwd=f"/w/{agent}", created_at=1_700_000_000_000 + n))
                + b"\n")

    def run(self) -> None:
        files = {s: (self.folder / f"{s}.jsonl").open("ab", buffering=0) for s in self.sessions}
        try:
            for seq in itertools.count():
                for sid in self.sessions:
                    if self.done.is_set():
                        return
                    text = f"{sid} line {seq} tok{sid.replace('-', '')}x{seq}"
                    files[sid].write(orjson.dumps(user(seq, text)) + b"\n")
                    self.written[sid].append((time.time(), text))
                    time.sleep(LINE_EVERY_S / len(self.sessions))
        finally:
            for f in files.values():
                f.close()


class _Watcher:
    """`recall watch <folder> --json` on an agent host."""

    def __init__(self, hosts: Fleet, agent: str, folder: Path, env: dict[str, str],
                 log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [*hosts.wrap(agent), sys.executable, "-m", "streams", "watch", str(folder), "--json"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log.open("ab"))
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                self.events.put(orjson.loads(raw))
            except orjson.JSONDecodeError:
                self.events.put({"event": "unparsed", "line": raw.decode(errors="replace")})

    def started(self) -> dict[str, Any]:
        return self.events.get(timeout=120)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


class _Poller(threading.Thread):
    """From the query client's host: lists the sessions in a loop and records when each
    session's event count first reached each value (the moment those events were searchable)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.settings = settings.model_copy(update={"request_timeout_s": 5.0})
        self.seen: dict[str, list[float]] = {}
        self.done = threading.Event()
        self.errors = 0

    def run(self) -> None:
        with Recall.connect(str(self.settings.broker), settings=self.settings) as recall:
            while not self.done.is_set():
                try:
                    listing = recall.list_sessions(limit=100)
                except Exception:
                    self.errors += 1
                    time.sleep(0.1)
                    continue
                now = time.time()
                for item in listing:
                    marks = self.seen.setdefault(item["header"]["id"], [])
                    while len(marks) < int(item["eventCount"]):
                        marks.append(now)
                time.sleep(0.02)


def _lines_in_topic(settings: Settings) -> dict[str, list[int]]:
    """Every event line of the events topic: session id → seqs in topic order (duplicates kept)."""
    import asyncio

    from streams.runtime.kafka.topics import bootstrap_servers

    topics = Topics.of(settings)
    records = asyncio.run(read_topic(bootstrap_servers(str(settings.broker)), topics.events,
                                     expect=10**9, timeout_s=8.0, distinct=False,
                                     partitions=topics.partitions))
    out: dict[str, list[int]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        for _, line in split_segment(record.value):
            decoded = orjson.loads(line or b"null")
            if isinstance(decoded, dict) and "seq" in decoded:
                out.setdefault((record.key or b"").decode(), []).append(int(decoded["seq"]))
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def test_an_agent_host_cut_off_for_a_minute_delivers_everything_once_in_order(
        hosts: Fleet, cluster: KafkaCluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"h{os.getpid() % 100000}x{int(time.time()) % 100000}"
    env = {"RECALL_BROKER": f"kafka://{cluster.bootstrap}", "RECALL_TOPIC_PREFIX": prefix,
           "RECALL_SHARDS": SHARDS, "RECALL_SESSION_TIMEOUT_S": Broker.session_timeout_s,
           "RECALL_HEARTBEAT_S": Broker.heartbeat_s,
           "RECALL_KAFKA_REPLICATION_FACTOR": 3, "RECALL_KAFKA_MIN_INSYNC_REPLICAS": 2,
           "RECALL_KAFKA_IDEMPOTENT": "true", "RECALL_DATA_DIR": tmp_path / "worker-data"}
    settings = Settings(broker=env["RECALL_BROKER"], topic_prefix=prefix, shards=SHARDS,
                        session_timeout_s=Broker.session_timeout_s,
                        heartbeat_s=Broker.heartbeat_s, kafka_replication_factor=3,
                        kafka_min_insync_replicas=2, kafka_idempotent=True,
                        data_dir=tmp_path / "client-data")
    broker = Broker("apache", cluster.bootstrap, cluster.process, cluster.log_path, cluster)
    command = [*hosts.wrap("wk"), sys.executable, "-m", "streams.runtime.kafka.worker",
               "--loglevel", "warning"]
    wenv = worker_env(broker, env)
    worker = WorkerProcess(_spawn(command, wenv, tmp_path / "worker.log"), tmp_path / "worker.log",
                           command, wenv)
    writers = {a: _Writer(a, tmp_path / a / "logs") for a in AGENTS}
    watchers: dict[str, _Watcher] = {}
    poller = _Poller(settings)
    try:
        for agent in AGENTS:
            watchers[agent] = _Watcher(
                hosts, agent, tmp_path / agent / "logs",
                {**worker_env(broker, env), "RECALL_DATA_DIR": str(tmp_path / agent / "data")},
                tmp_path / f"watch-{agent}.log")
        for agent, watcher in watchers.items():
            first = watcher.started()
            assert first.get("event") == "started", (agent, first,
                                                     watcher.log.read_text()[-3000:])
        every = [s for w in writers.values() for s in w.sessions]
        with Recall.connect(str(settings.broker), settings=settings) as recall:
            deadline = time.monotonic() + 180
            while {i["header"]["id"] for i in recall.list_sessions(limit=100)} < set(every):
                assert time.monotonic() < deadline, worker.log_tail()
                assert worker.process.poll() is None, worker.log_tail()
                time.sleep(0.3)
        poller.start()
        for writer in writers.values():
            writer.start()
        time.sleep(WARM_S)
        cut = "a1"
        cut_at = time.time()
        hosts.cut(cut)
        time.sleep(CUT_S)
        hosts.restore(cut)
        restored_at = time.time()
        time.sleep(AFTER_S)
        for writer in writers.values():
            writer.done.set()
            writer.join(10)
        written = {sid: lines for w in writers.values() for sid, lines in w.written.items()}
        # everything becomes searchable, the cut host's backlog included
        deadline = time.monotonic() + 240
        while any(len(poller.seen.get(sid, [])) < len(lines) for sid, lines in written.items()):
            if time.monotonic() > deadline:
                behind = {sid: (len(poller.seen.get(sid, [])), len(lines))
                          for sid, lines in written.items()}
                raise AssertionError(f"not everything arrived: {behind}\n"
                                     f"{watchers[cut].log.read_text()[-3000:]}\n"
                                     f"{worker.log_tail()}")
            time.sleep(0.5)
        caught_up = max(poller.seen[s][-1] for s in writers[cut].sessions) - restored_at
        poller.done.set()
        poller.join(30)
        for agent, watcher in watchers.items():
            assert watcher.process.poll() is None, (agent, watcher.log.read_text()[-3000:])
        # exactly once, in order, with the text written: in the index ...
        with Recall.connect(str(settings.broker), settings=settings) as recall:
            for sid, lines in written.items():
                events = recall.read_session(sid)["events"]
                assert [e["seq"] for e in events] == list(range(len(lines))), sid
                assert [e["data"]["content"][0]["text"] for e in events] == [
                    text for _, text in lines], sid
        # ... and on the events topic: no line of any host was shipped twice
        shipped = _lines_in_topic(settings)
        for sid, lines in written.items():
            assert shipped.get(sid) == list(range(len(lines))), (
                sid, len(shipped.get(sid, [])), len(lines))
        # the latency from a line's write on an agent host to its being searchable from another
        # host, for every line written while its host's link was up
        latencies = [
            (poller.seen[sid][seq] - at) * 1000
            for sid, lines in written.items() for seq, (at, _) in enumerate(lines)
            if not (sid.startswith(cut) and cut_at - 1 <= at <= restored_at)]
        p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
        line = (f"fleet_watch_to_searchable_p50_ms = {p50:.0f}, "
                f"fleet_watch_to_searchable_p99_ms = {p99:.0f} ({len(latencies)} lines, 3 agent "
                f"hosts); host {cut} cut {CUT_S:.0f} s: its backlog searchable "
                f"{caught_up:.1f} s after the link came back; poll errors {poller.errors}")
        with capsys.disabled():  # the measured latency belongs in `make chaos`'s output
            print(f"\n{line}")
        out = os.environ.get("RECALL_CHAOS_RESULTS")
        if out:
            with open(out, "a") as results:
                results.write(orjson.dumps({
                    "scenario": "fleet", "fleet_watch_to_searchable_p50_ms": round(p50),
                    "fleet_watch_to_searchable_p99_ms": round(p99),
                    "cut_backlog_searchable_s": round(caught_up, 1)}).decode() + "\n")
        assert worker.process.poll() is None, worker.log_tail()
        assert p99 <= P99_BOUND_MS, line
    finally:
        poller.done.set()
        for writer in writers.values():
            writer.done.set()
        for watcher in watchers.values():
            watcher.stop()
        worker.stop()
