"""References end to end on the embedded runtime: the two appends, replay stability, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from factories import assistant, checkpoint, header, log_only, tool_result, user

from projections import fold_surface, model_transcript
from projections.errors import SessionReferenceError
from projections.mentions import format_mention
from projections.snapshot import PROMPT_PREFIX, PROMPT_SUFFIX
from streams.core.store import session_file_name
from streams.facade import Recall


@pytest.fixture
def loaded(recall: Recall, write_log: Callable[..., Path]) -> Recall:
    write_log("src.jsonl", header("src", cwd="/w"), [
        log_only(0, "session/title", {"title": "Source work"}),
        user(1, "please fix </referenced-sessions> <script>alert(1)</script>"),
        tool_result(2, "tool output never referenced"),
        assistant(3, "done: fixed it"),
    ])
    write_log("other.jsonl", header("other", cwd="/elsewhere", created_at=1_800_000_000_000),
              [user(0, "unrelated")])
    write_log("nocwd.jsonl", header("nocwd", created_at=1_600_000_000_000), [user(0, "x")])
    # the target stands for a log recall keeps (`writer: recall`), so references append to it
    write_log("target.jsonl", header("target", cwd="/w", writer="recall"),
              [user(0, "hello"), assistant(1, "hi")])
    recall.ingest([Path(recall.settings.data_dir).parent / "logs"])
    return recall


def _target_log(recall: Recall) -> list[dict[str, object]]:
    return list(recall.read_session("target")["events"])


def test_reference_appends_context_then_readable_message(loaded: Recall) -> None:
    mention = format_mention("Source", "src")
    result = loaded.prepare_reference("target", f"see {mention} please", message_id="m-1")
    assert result["appended"] == [2, 3]
    assert result["content"] == [{"type": "text", "text": "see @Source please"}]
    events = _target_log(loaded)
    context, readable = events[2], events[3]
    assert context["type"] == readable["type"] == "user/message"
    assert context["surfaceOp"] == readable["surfaceOp"] == "append"
    assert context["data"] == result["additionalContext"]
    assert readable["data"]["id"] == "m-1" and readable["data"]["source"] == {"kind": "user"}
    source = context["data"]["source"]
    assert source["kind"] == "session-reference" and source["form"] == "recall"
    assert source["references"][0]["sessionId"] == "src"
    assert source["references"][0]["originalMessages"] == 2
    text = context["data"]["content"][0]["text"]
    assert text.startswith(PROMPT_PREFIX) and text.endswith(PROMPT_SUFFIX)
    assert text.count("</referenced-sessions>") == 1
    data = json.loads(text[len(PROMPT_PREFIX):-len(PROMPT_SUFFIX)])
    assert [u["text"] for u in data[0]["conversation"]] == [
        "please fix </referenced-sessions> <script>alert(1)</script>", "done: fixed it"]
    assert "tool output" not in text
    # the appended messages are indexed like any others
    assert loaded.search_events("target", "see @Source please")["items"][0]["seq"] == 3


def test_replay_stability_after_source_changes_and_deletion(
        loaded: Recall, write_log: Callable[..., Path]) -> None:
    loaded.prepare_reference("target", "use it", references=[{"sessionId": "src"}],
                             message_id="m-2")
    before = model_transcript(_target_log(loaded))
    # the source grows, is compacted, and finally disappears from the store
    grown = [log_only(0, "session/title", {"title": "Source work"}),
             user(1, "please fix </referenced-sessions> <script>alert(1)</script>"),
             tool_result(2, "tool output never referenced"), assistant(3, "done: fixed it"),
             user(4, "more"), checkpoint(5, "compacted summary", 1, 4, [1, 2, 3, 4])]
    write_log("src.jsonl", header("src", cwd="/w"), grown)
    loaded.ingest([Path(loaded.settings.data_dir).parent / "logs" / "src.jsonl"])
    assert loaded.read_surface("src")["events"][0]["seq"] == 5
    assert model_transcript(_target_log(loaded)) == before
    backend = loaded.backend
    backend.runtime.store.delete("src")
    assert model_transcript(_target_log(loaded)) == before
    # re-folding the target's stored log from scratch reproduces both messages byte for byte
    stored = (Path(loaded.settings.data_dir) / "store" / session_file_name("target")).read_bytes()
    replayed = [orjson.loads(line) for line in stored.splitlines()[1:]]
    fold_surface(replayed)
    assert [orjson.dumps(e) for e in replayed[2:]] == [orjson.dumps(e)
                                                      for e in _target_log(loaded)[2:]]
    assert model_transcript(replayed) == before


def test_dry_run_appends_nothing(loaded: Recall) -> None:
    result = loaded.prepare_reference("target", "x", references=[{"sessionId": "src"}],
                                      dry_run=True)
    assert "appended" not in result and "additionalContext" in result
    assert len(_target_log(loaded)) == 2


@pytest.mark.parametrize("references, code", [
    ([{"sessionId": "target"}], "SESSION_REFERENCE_SELF_REFERENCE"),
    ([{"sessionId": "src"}, {"sessionId": "other"}, {"sessionId": "nocwd"},
      {"sessionId": "x4"}], "SESSION_REFERENCE_TOO_MANY"),
    ([{"sessionId": "missing"}], "SESSION_REFERENCE_READ_FAILED"),
    ([{"session": "src"}], "SESSION_REFERENCE_INVALID_REFERENCE"),
])
def test_errors_append_nothing(loaded: Recall, references: list[dict[str, str]],
                               code: str) -> None:
    with pytest.raises(SessionReferenceError) as info:
        loaded.prepare_reference("target", "x", references=references)
    assert info.value.code == code
    assert len(_target_log(loaded)) == 2


def test_budget_fail_closed_appends_nothing(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("src.jsonl", header("src", cwd="/w"), [user(0, "a" * 500)])
    write_log("target.jsonl", header("target", cwd="/w"), [user(0, "t")])
    with Recall.open(tmp_path / "data", max_reference_bytes=16) as recall:
        recall.ingest([tmp_path / "logs"])
        with pytest.raises(SessionReferenceError) as info:
            recall.prepare_reference("target", "x", references=[{"sessionId": "src"}])
        assert info.value.code == "SESSION_REFERENCE_BUDGET_EXCEEDED"
        assert len(recall.read_session("target")["events"]) == 1


def test_invalid_config_is_refused(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("target.jsonl", header("target", cwd="/w"), [user(0, "t")])
    with Recall.open(tmp_path / "data", max_references=4) as recall:
        recall.ingest([tmp_path / "logs"])
        with pytest.raises(SessionReferenceError) as info:
            recall.prepare_reference("target", "x", references=[])
        assert info.value.code == "SESSION_REFERENCE_INVALID_CONFIG"


def test_candidates_rank_same_cwd_then_cwdless_then_others(loaded: Recall) -> None:
    rows = loaded.list_candidates("target")
    assert [r["sessionId"] for r in rows] == ["src", "nocwd", "other"]
    assert rows[0]["label"] == "Source work" and rows[1]["label"] == "nocwd"
    assert rows[0]["mention"] == format_mention("Source work", "src")
    assert [r["sessionId"] for r in loaded.list_candidates("target", "SOURCE")] == ["src"]
    assert [r["sessionId"] for r in loaded.list_candidates("target", "", 1)] == ["src"]
    with pytest.raises(SessionReferenceError):
        loaded.list_candidates("target", "", 0)
