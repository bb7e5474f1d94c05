"""A fleet on a secured Apache Kafka (SASL_SSL, SCRAM-SHA-512, certificates made here, ACLs by
the StandardAuthorizer): each role's principal does its job with only its ACLs; a wrong password,
a wrong CA or a missing ACL is the STREAM_* error that says which, quickly; and a request key
limited to one workspace gets, for another workspace's session, exactly the missing-session
answer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from factories import header, user

from projections.errors import RecallError
from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.cli.main import main
from streams.runtime.kafka.connection import client_options, diagnose
from streams.runtime.kafka.rpc import RemoteError, Requester
from streams.runtime.kafka.topics import Topics
from streams.runtime.kafka.workspaces import Signer
from tests.integration.brokers import Broker
from tests.integration.kafkaio import REPO, WorkerProcess, start_worker
from tests.integration.secure_kafka import (
    ALL,
    DESCRIBE,
    GROUP,
    LITERAL,
    MECHANISM,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    SecureKafka,
    add_acls,
    start_secure_kafka,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SHARDS = 2
USERS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("admin", "worker", "agent", "asker")}
KEYS = {"team-a": uuid.uuid4().hex, "ops": uuid.uuid4().hex}
WORKSPACE_A, WORKSPACE_B = "/work/team-a", "/work/team-b"
#: A refused connection must be reported within this many seconds, never hang.
QUICK_S = 20.0


@dataclass
class Fleet:
    kafka: SecureKafka
    prefix: str
    work: Path
    worker: WorkerProcess

    def settings(self, user: str | None, password: str | None = None, **more: Any) -> Settings:
        fields: dict[str, Any] = dict(
            broker=self.kafka.url, topic_prefix=self.prefix, shards=SHARDS,
            data_dir=self.work / f"client-{user}", kafka_security_protocol="SASL_SSL",
            kafka_ssl_cafile=self.kafka.certs.ca, kafka_sasl_mechanism=MECHANISM,
            kafka_sasl_username=user, kafka_sasl_password=password or USERS[str(user)],
            request_timeout_s=15.0)
        fields.update(more)
        return Settings(**fields)

    def key_file(self, key_id: str, secret: str | None = None) -> dict[str, Any]:
        path = self.work / f"key-{key_id}-{uuid.uuid4().hex[:6]}"
        path.write_text((secret or KEYS[key_id]) + "\n")
        return {"kafka_request_key_id": key_id, "kafka_request_key_file": path}


def worker_env_of(fleet: Fleet) -> dict[str, Any]:
    """The worker principal's RECALL_* environment (what `recall worker` runs with)."""
    return {"RECALL_BROKER": fleet.kafka.url, "RECALL_TOPIC_PREFIX": fleet.prefix,
            "RECALL_SHARDS": str(SHARDS), "RECALL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "RECALL_KAFKA_SSL_CAFILE": str(fleet.kafka.certs.ca),
            "RECALL_KAFKA_SASL_MECHANISM": MECHANISM, "RECALL_KAFKA_SASL_USERNAME": "worker",
            "RECALL_KAFKA_SASL_PASSWORD": USERS["worker"],
            "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}


def acls(prefix: str) -> list[tuple[int, str, int, str, int]]:
    """Each role's ACLs: workers own the prefix's topics and groups; an agent host may only
    produce events (and park what it cannot read as dead letters); a query client may only
    write requests and read replies."""
    topics = Topics(prefix, SHARDS)
    rows = [(TOPIC, prefix, PREFIXED, "User:worker", ALL),
            (GROUP, prefix, PREFIXED, "User:worker", ALL)]
    for topic in (topics.events, topics.dead_letter):
        rows += [(TOPIC, topic, LITERAL, "User:agent", op) for op in (WRITE, DESCRIBE)]
    rows += [(TOPIC, topics.requests, LITERAL, "User:asker", op) for op in (WRITE, DESCRIBE)]
    rows += [(TOPIC, topics.replies, LITERAL, "User:asker", op) for op in (READ, DESCRIBE)]
    return rows


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("secured")
    started = time.monotonic()
    try:
        kafka = start_secure_kafka(work / "kafka", USERS)
    except RuntimeError as exc:  # ApacheKafkaUnavailable too: fail, never skip
        pytest.fail(str(exc), pytrace=False)
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    try:
        admin = Fleet(kafka, prefix, work, None)  # type: ignore[arg-type]
        add_acls(client_options(admin.settings("admin")), acls(prefix))
        keyfile = work / "request-keys.json"
        keyfile.write_bytes(orjson.dumps({"keys": {
            "team-a": {"secret": KEYS["team-a"], "workspaces": [WORKSPACE_A]},
            "ops": {"secret": KEYS["ops"], "workspaces": "*"}}}))
        env = {**worker_env_of(admin), "RECALL_DATA_DIR": work / "worker-data",
               "RECALL_KAFKA_REQUEST_KEYS": keyfile}
        broker = Broker("apache", f"127.0.0.1:{kafka.sasl_port}", kafka.cluster.process,
                        kafka.log_path, kafka.cluster)
        worker = start_worker(broker, env, work / "worker.log")
        try:
            fleet = Fleet(kafka, prefix, work, worker)
            # the worker creates the topics; until then a principal without CREATE is refused
            wait_listed(fleet, set())
            print(f"secured broker and worker started in {time.monotonic() - started:.1f} s")
            yield fleet
        finally:
            worker.stop()
        assert USERS["worker"] not in (work / "worker.log").read_text(errors="replace"), \
            "the worker's log shows its SASL password"
    finally:
        for node in kafka.cluster.nodes:
            node.kill()


def session_file(path: Path, session_id: str, cwd: str, words: str) -> Path:
    path.write_bytes(orjson.dumps(header(session_id, cwd=cwd)) + b"\n"
                     + orjson.dumps(user(0, words)) + b"\n")
    return path


def ingest_as_agent(fleet: Fleet, files: list[Path]) -> None:
    with Recall.connect(fleet.kafka.url, settings=fleet.settings("agent")) as recall:
        report = recall.ingest(files)
    assert report.files == len(files), report


def wait_listed(fleet: Fleet, session_ids: set[str], timeout_s: float = 90.0) -> None:
    settings = fleet.settings("asker", **fleet.key_file("ops"))
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            with Recall.connect(fleet.kafka.url, settings=settings) as recall:
                while time.monotonic() < deadline:
                    last = {r["header"]["id"] for r in recall.list_sessions()}
                    if session_ids <= last:
                        return
                    time.sleep(0.5)
        except RecallError as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"not listed in {timeout_s}s: {last!r}\n{fleet.worker.log_tail()}")


def ask(fleet: Fleet, op: str, args: dict[str, Any], signer: Signer | None) -> tuple[str, bytes]:
    """One request as the asker principal: ("ok", result JSON) or ("error", code + message)."""
    settings = fleet.settings("asker")
    topics = Topics.of(settings)

    async def run() -> tuple[str, bytes]:
        requester = Requester(client_options(settings), topics.replies, SHARDS, signer=signer)
        await requester.start()
        try:
            result = await requester.request_retrying(topics.requests, op, args,
                                                      deadline=time.time() + 20)
            return "ok", orjson.dumps(result, option=orjson.OPT_SORT_KEYS)
        except RemoteError as exc:
            return "error", orjson.dumps({"code": exc.code, "message": exc.message})
        finally:
            await requester.stop()

    return asyncio.run(run())


def test_each_principal_does_its_job_over_sasl_ssl_with_only_its_acls(
        fleet: Fleet, tmp_path: Path) -> None:
    files = [session_file(tmp_path / "a.jsonl", "sec-a1", WORKSPACE_A, "heliotrope alpha"),
             session_file(tmp_path / "b.jsonl", "sec-b1", WORKSPACE_B, "heliotrope beta")]
    ingest_as_agent(fleet, files)
    wait_listed(fleet, {"sec-a1", "sec-b1"})
    settings = fleet.settings("asker", **fleet.key_file("ops"))
    with Recall.connect(fleet.kafka.url, settings=settings) as recall:
        found = recall.search_sessions("heliotrope")
    assert {i["header"]["id"] for i in found["items"]} == {"sec-a1", "sec-b1"}


def _refused(settings: Settings, action: str) -> RecallError:
    started = time.monotonic()
    with pytest.raises(RecallError) as caught, \
            Recall.connect(settings.broker or "", settings=settings) as recall:
        if action == "list":
            recall.list_sessions()
        else:
            recall.ingest([session_file(settings.data_dir.parent / "x.jsonl", "sec-x",
                                        WORKSPACE_A, "refused")])
    assert time.monotonic() - started < QUICK_S, "a refused connection took too long"
    return caught.value


def test_a_wrong_password_a_wrong_ca_and_a_missing_acl_each_say_which(fleet: Fleet) -> None:
    wrong_password = _refused(fleet.settings("asker", "not-the-password"), "list")
    assert wrong_password.code == "STREAM_AUTH_FAILED", wrong_password
    assert "not-the-password" not in str(wrong_password.to_json())

    wrong_ca = _refused(fleet.settings("asker", kafka_ssl_cafile=fleet.kafka.certs.other_ca),
                        "list")
    assert wrong_ca.code == "STREAM_TLS_FAILED", wrong_ca
    assert "certificate" in wrong_ca.message

    # an agent host may not read replies; a query client may not produce events
    no_replies = _refused(fleet.settings("agent"), "list")
    assert no_replies.code == "STREAM_NOT_AUTHORIZED", no_replies
    assert f"{fleet.prefix}.replies" in no_replies.message
    no_events = _refused(fleet.settings("asker"), "ingest")
    assert no_events.code == "STREAM_NOT_AUTHORIZED", no_events
    assert f"{fleet.prefix}.events" in no_events.message


def test_only_workers_read_documents_and_the_fold_changelog(fleet: Fleet) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topics = Topics(fleet.prefix, SHARDS)

    async def read(settings: Settings, topic: str, wait_s: float = 2.0) -> Any:
        """The records of `topic` (test 1 indexed two sessions), else why there are none."""
        conn = client_options(settings)
        consumer = AIOKafkaConsumer(**conn, group_id=None, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, k) for k in range(SHARDS)])
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=1000)
                if got:
                    return [r for records in got.values() for r in records]
            # aiokafka retries a partition it may not read (and logs it): ask why
            return await diagnose(conn, [topic])
        finally:
            await consumer.stop()

    for principal in ("agent", "asker"):
        for topic in (topics.documents, topics.changelog):
            answer = asyncio.run(read(fleet.settings(principal), topic))
            assert isinstance(answer, RecallError) and answer.code == "STREAM_NOT_AUTHORIZED", \
                (principal, topic, answer)
            assert topic in answer.message
    assert asyncio.run(read(fleet.settings("worker"), topics.documents, wait_s=20))

    # nor can another principal run a worker: it stops at once, saying so
    env = {**worker_env_of(fleet), "RECALL_KAFKA_SASL_USERNAME": "agent",
           "RECALL_KAFKA_SASL_PASSWORD": USERS["agent"],
           "RECALL_DATA_DIR": str(fleet.work / "agent-worker")}
    done = subprocess.run([sys.executable, "-m", "streams.faces.cli.main", "worker"], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "STREAM_NOT_AUTHORIZED" in output, output
    assert "Traceback" not in output and USERS["agent"] not in output, output


def test_the_cli_reports_a_wrong_password_as_its_code_without_a_traceback(
        fleet: Fleet) -> None:
    env = {"RECALL_BROKER": fleet.kafka.url, "RECALL_TOPIC_PREFIX": fleet.prefix,
           "RECALL_SHARDS": str(SHARDS), "RECALL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "RECALL_KAFKA_SSL_CAFILE": str(fleet.kafka.certs.ca),
           "RECALL_KAFKA_SASL_MECHANISM": MECHANISM, "RECALL_KAFKA_SASL_USERNAME": "asker",
           "RECALL_KAFKA_SASL_PASSWORD": "wrong-password-123",
           "RECALL_DATA_DIR": str(fleet.work / "cli-data")}
    result = CliRunner().invoke(main, ["sessions"], env=env)
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code == 1, output
    assert "STREAM_AUTH_FAILED" in output and "Traceback" not in output, output
    assert "wrong-password-123" not in output


def test_a_key_for_workspace_a_gets_the_missing_answer_for_workspace_b(
        fleet: Fleet, tmp_path: Path) -> None:
    team_a = Signer("team-a", KEYS["team-a"].encode())
    ops = Signer("ops", KEYS["ops"].encode())
    hidden = "sec-b2"
    single = [("read_session", {"sessionId": hidden}), ("read_surface", {"sessionId": hidden}),
              ("read_event", {"sessionId": hidden, "seq": 0}),
              ("trace_event", {"sessionId": hidden, "seq": 0}),
              ("trace_session", {"sessionId": hidden}),
              ("filter_events", {"sessionId": hidden, "filters": []}),
              ("search_events", {"request": {"sessionId": hidden, "query": "quetzal"}}),
              ("resolve_session", {"sessionId": "sec-b"})]
    listings = [("search_sessions", {"request": {"query": "quetzal"}}),
                ("filter_sessions", {"filters": [{"kind": "id", "values": [hidden]}]}),
                ("filter_sessions", {"filters": [{"kind": "cwd", "values": [WORKSPACE_B]}]})]
    missing = {(op, orjson.dumps(args)): ask(fleet, op, args, team_a)
               for op, args in single + listings}

    ingest_as_agent(fleet, [session_file(tmp_path / "b2.jsonl", hidden, WORKSPACE_B,
                                         "quetzal feathers"),
                            session_file(tmp_path / "a2.jsonl", "sec-a2", WORKSPACE_A,
                                         "quetzal plumes")])
    wait_listed(fleet, {hidden, "sec-a2"})
    assert ask(fleet, "read_session", {"sessionId": hidden}, ops)[0] == "ok"

    for op, args in single + listings:
        answer = ask(fleet, op, args, team_a)
        if op == "search_sessions":  # A's own new session is found; B's is not
            kind, body = answer
            assert kind == "ok" and [i["header"]["id"] for i in orjson.loads(body)["items"]] \
                == ["sec-a2"], answer
            continue
        assert answer == missing[(op, orjson.dumps(args))], (op, answer)
    assert missing[("read_session", orjson.dumps({"sessionId": hidden}))][0] == "error"
    assert ask(fleet, "read_session", {"sessionId": "sec-a2"}, team_a)[0] == "ok"

    unsigned = ask(fleet, "list_sessions", {}, None)
    assert unsigned[0] == "error" and b"STREAM_REQUEST_UNAUTHENTICATED" in unsigned[1]
    forged = ask(fleet, "list_sessions", {}, Signer("ops", b"not-the-secret-of-ops"))
    assert forged[0] == "error" and b"STREAM_REQUEST_UNAUTHENTICATED" in forged[1]
    digest = ask(fleet, "index_digest", {}, team_a)
    assert digest[0] == "error" and b"STREAM_REQUEST_FORBIDDEN" in digest[1]
    assert ask(fleet, "index_digest", {}, ops)[0] == "ok"
