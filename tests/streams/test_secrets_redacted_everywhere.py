"""Secrets stay where they were — redacted before anything is indexed, snippeted, read
out or referenced; the store keeps the original; a change of rules rebuilds the index.

The corpus (tests/support/secretcorpus.py) plants generated secrets of every kind in user
prompts, tool results, tool-call arguments (tool/call events and assistant tool-call blocks) and
a compaction (its summary event and the checkpoint that replaces the surface).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from datadirs import recall_cmd, recall_env
from secretcorpus import planted_secrets, secret_fragments, secret_sessions, write_sessions

from indexer.maintenance import redaction_totals, shard_stats
from streams.core.settings import Settings
from streams.core.store import session_file_name
from streams.facade import Recall
from streams.faces.mcp import Caller, SessionTools

PLANTED = planted_secrets()
FRAGMENTS = sorted({f for p in PLANTED for f in secret_fragments(p.value)})
KINDS = sorted({p.kind for p in PLANTED})
LEAKY = ["leak-prompts", "leak-results", "leak-calls", "leak-compacted"]
CWD = "/work/secrets-demo"


def leaked(value: Any) -> list[str]:
    """The planted secret fragments that occur anywhere in `value` (any JSON-able or text)."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return [f for f in FRAGMENTS if f in text]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_sessions(tmp_path_factory.mktemp("secrets") / "src", secret_sessions())


@pytest.fixture
def recall(tmp_path: Path, corpus: list[Path]) -> Any:
    with Recall.open(tmp_path / "data", shards=2) as instance:
        report = instance.ingest(corpus)
        assert report.rejected == 0 and report.events_added > 0
        yield instance


def all_items(recall: Recall, method: str, query: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = getattr(recall, method)(query=query, **kwargs)
    items += page["items"]
    while page.get("nextCursor"):
        page = getattr(recall, method)(request={"cursor": page["nextCursor"]})
        items += page["items"]
    return items


def test_the_corpus_really_holds_every_secret(corpus: list[Path]) -> None:
    text = b"".join(p.read_bytes() for p in corpus).decode()
    for planted in PLANTED:
        # in a prompt, a tool result, tool-call arguments and a compaction summary
        assert text.count(planted.value) >= 4, planted.kind


def test_no_secret_is_findable_by_search_in_token_or_substring_mode(recall: Recall) -> None:
    for fragment in FRAGMENTS:
        for mode in ("token", "substring"):
            assert all_items(recall, "search_sessions", fragment, mode=mode) == [], (fragment, mode)
            for sid in LEAKY:
                assert all_items(recall, "search_events", fragment, session_id=sid,
                                 mode=mode) == [], (fragment, mode, sid)


def test_markers_are_searchable_by_kind_and_snippets_hold_no_secret(recall: Recall) -> None:
    for kind in KINDS:
        for mode in ("token", "substring"):
            hits = all_items(recall, "search_sessions", f"[redacted:{kind}]", mode=mode)
            assert {h["header"]["id"] for h in hits} >= {"leak-prompts", "leak-results"}, kind
            assert not leaked(hits)
        events = all_items(recall, "search_events", f"redacted:{kind}", session_id="leak-calls")
        assert events and all(kind in orjson.dumps(e).decode() for e in events)
        assert not leaked(events)


def test_reads_traces_and_filters_hold_no_secret(recall: Recall) -> None:
    answers: list[Any] = [recall.list_sessions()]
    for sid in [*LEAKY, "clean-target"]:
        session = recall.read_session(sid)
        answers += [session, recall.read_surface(sid), recall.trace_session(sid),
                    recall.filter_events(sid, [{"kind": "text", "value": "redacted"}])]
        for event in session["events"]:
            seq = event["seq"]
            answers += [recall.read_event(sid, seq, before=2, after=2),
                        recall.trace_event(sid, seq)]
    assert leaked(answers) == []
    dumped = orjson.dumps(answers).decode()
    for kind in KINDS:
        assert f"[redacted:{kind}]" in dumped
    # the compaction summary event (log-only, never indexed as text) is redacted as well
    summary = recall.read_event("leak-compacted", 3)["event"]["event"]["data"]["summary"]
    assert "[redacted:" in summary and not leaked(summary)
    # structure survives: the surface still folds to the checkpoint and the events after it
    surface = recall.read_surface("leak-compacted")
    assert [e["seq"] for e in surface["events"]] == [4, 6, 7]


def test_a_prepared_reference_carries_markers_not_secrets(recall: Recall) -> None:
    references = [{"sessionId": "leak-prompts"}, {"sessionId": "leak-compacted"}]
    dry = recall.prepare_reference("clean-target", "what leaked?", references=references,
                                   dry_run=True)
    assert "[redacted:github-token]" in orjson.dumps(dry).decode()
    assert leaked(dry) == []
    returned = recall.prepare_reference("clean-target", "what leaked?", references=references,
                                        message_id="ref-1")
    assert returned["delivery"] == "returned" and leaked(returned) == []
    # a session recall writes gets [context, readable] appended to its own log: redacted too
    recall.create_session("recall-target", cwd=CWD)
    done = recall.prepare_reference("recall-target", "what leaked?", references=references,
                                    message_id="ref-2")
    assert done["delivery"] == "appended" and done["appended"] and leaked(done) == []
    assert leaked(recall.read_session("recall-target")) == []
    store = Path(recall.settings.data_dir) / "store" / session_file_name("recall-target")
    assert "[redacted:github-token]" in store.read_text() and leaked(store.read_text()) == []


def test_agent_tool_answers_hold_no_secret(recall: Recall) -> None:
    tools = SessionTools(recall)
    caller = Caller("clean-target", CWD)
    answers = [tools.call("session_search", {"query": "redacted"}, caller).text,
               tools.call("session_search", {"query": "deploy notes"}, caller).text]
    for kind in KINDS:
        answers.append(tools.call("session_search", {"query": f"redacted:{kind}"}, caller).text)
    for sid in LEAKY:
        answers.append(tools.call("session_event_search", {"session_id": sid,
                                                           "query": "redacted"}, caller).text)
        answers.append(tools.call("session_trace", {"session_id": sid}, caller).text)
        for event in recall.read_session(sid)["events"]:
            args = {"session_id": sid, "seq": event["seq"]}
            answers.append(tools.call("session_event_read", {**args, "before": 1, "after": 1},
                                      caller).text)
            answers.append(tools.call("session_event_trace", args, caller).text)
    answers.append(tools.call("session_reference", {"session_ids": LEAKY[:3]}, caller).text)
    text = "\n".join(answers)
    assert "[redacted:" in text
    assert leaked(text) == []


def test_the_store_keeps_the_original_owner_only(recall: Recall) -> None:
    store = Path(recall.settings.data_dir) / "store"
    for sid in LEAKY:
        path = store / session_file_name(sid)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        original = path.read_text()
        assert all(p.value in original for p in PLANTED if sid != "leak-compacted")
    # and the index files hold none of it: not in the raw blocks, not in the FTS tables
    shards = list(Path(recall.settings.data_dir).rglob("shard-*"))
    assert len(shards) >= 2
    for shard in shards:
        data = shard.read_bytes()
        assert not any(f.encode() in data for f in FRAGMENTS), shard.name


def test_index_stats_count_each_kind_and_print_no_secret(recall: Recall, tmp_path: Path) -> None:
    rows = shard_stats(recall.backend.runtime.shards)
    totals = redaction_totals(rows)
    assert set(totals) >= set(KINDS)
    # each planted secret is in ≥ 4 events (one per leaky session, several copies in some)
    assert all(totals[kind] >= 4 for kind in KINDS)
    assert {r["redaction"] for r in rows} == {recall.backend.runtime.redactor.fingerprint}
    recall.close()
    data = Path(recall.settings.data_dir)
    env = recall_env(RECALL_SHARDS="2")
    for args in (["index", "stats", "--json"], ["index", "stats"]):
        run = recall_cmd(data, *args, env=env)
        assert run.returncode == 0, run.stderr
        out = run.stdout.decode()
        assert leaked(out) == [] and leaked(run.stderr.decode()) == []
        assert "github-token" in out
    stats = orjson.loads(recall_cmd(data, "index", "stats", "--json", env=env).stdout)
    assert sum(r["redacted"].get("jwt", 0) for r in stats) == totals["jwt"]


def test_same_log_gives_the_same_redacted_index(tmp_path: Path, corpus: list[Path]) -> None:
    digests = []
    for name in ("one", "two"):
        with Recall.open(tmp_path / name, shards=3 if name == "one" else 5) as instance:
            instance.ingest(corpus)
            digests.append(instance.index_digest()["digest"])
            if name == "two":
                rebuilt = instance.reindex()
                assert rebuilt["digest"] == digests[0]
    assert digests[0] == digests[1]


def _open(data: Path, **settings: Any) -> Recall:
    return Recall.open(settings=Settings(data_dir=data, shards=2, **settings))


def test_a_change_of_rules_rebuilds_the_index_from_the_store(
        tmp_path: Path, corpus: list[Path], capfd: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    token = next(p.value for p in PLANTED if p.kind == "github-token")
    with _open(data) as first:
        first.ingest(corpus)
        assert all_items(first, "search_sessions", token) == []
    # RECALL_REDACT=off: raw search on one's own machine (the index is rebuilt, said on stderr)
    with _open(data, redact=False) as raw:
        assert "redaction rules" in capfd.readouterr().err
        assert {h["header"]["id"] for h in all_items(raw, "search_sessions", token)} >= set(LEAKY)
        assert redaction_totals(shard_stats(raw.backend.runtime.shards)) == {}
    # back on, plus a custom pattern and an allow-list entry
    custom = {"deploy-note": r"deploy notes (\d+)"}
    allowed = next(p.value for p in PLANTED if p.kind == "slack-token")
    with _open(data, redact_patterns=custom, redact_allow=[allowed]) as again:
        assert "redaction rules" in capfd.readouterr().err
        assert all_items(again, "search_sessions", token) == []
        assert all_items(again, "search_sessions", allowed)  # allowed: left as it is
        hits = all_items(again, "search_sessions", "[redacted:deploy-note]")
        assert [h["header"]["id"] for h in hits] == ["leak-prompts"]
        first_prompt = again.read_event("leak-prompts", 0)["event"]["text"]
        assert first_prompt.startswith("deploy notes [redacted:deploy-note]: ")
    # the same settings again: nothing to rebuild
    with _open(data, redact_patterns=custom, redact_allow=[allowed]):
        assert "redaction rules" not in capfd.readouterr().err


def test_bad_custom_patterns_are_config_errors(tmp_path: Path) -> None:
    env = recall_env(RECALL_REDACT_PATTERNS='{"Bad Kind": "x"}')
    run = recall_cmd(tmp_path / "data", "sessions", env=env)
    assert run.returncode == 2 and b"RECALL_REDACT_PATTERNS" in run.stderr
    env = recall_env(RECALL_REDACT_ALLOW='["(unclosed"]')
    run = recall_cmd(tmp_path / "data", "sessions", env=env)
    assert run.returncode == 2 and b"RECALL_REDACT_ALLOW" in run.stderr
    assert "RECALL_REDACT" not in os.environ
