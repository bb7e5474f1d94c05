"""The CLI for people: searches they can type, short session ids, output that is never
hard-wrapped, transcripts for show/surface/trace, data.raw only with --raw, and ingest progress
in bytes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from factories import assistant, checkpoint, header, log_only, user
from rich.console import Console

from indexer.filters import cwd_tree_bounds
from streams.faces import views
from streams.faces.cli import main as cli
from streams.faces.cli.main import main
from streams.faces.cli.progress import ingest_progress

LONG = "s-" + "x" * 150  # longer than any terminal line
LONG_CWD = "/w/app/" + "deep/" * 30


def _write(path: Path, head: dict[str, Any], events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in [head, *events]))
    return path


def tool_call_pair(seq: int, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message carrying a tool-call block, then its tool/call event."""
    message = assistant(seq, "")
    message["data"]["message"]["content"] = [
        {"type": "tool-call", "id": f"c{seq}", "name": name, "arguments": arguments}]
    call = log_only(seq + 1, "tool/call", {"turn": 0, "step": 0, "callId": f"c{seq}",
                                           "name": name, "arguments": arguments})
    return [message, call]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("i14")
    src = root / "src"
    src.mkdir()
    _write(src / "app.jsonl", header("app-1", cwd="/w/app", created_at=1_000),
           [user(0, "why do the shadow branches pile up?"),
            user(1, "<environment_context>shadow branches env</environment_context>",
                 kind="plugin", plugin="codex-context"),
            *tool_call_pair(2, "exec_command", {"cmd": "git branch --list shadow"}),
            assistant(4, "Nothing deletes the shadow branches.")])
    _write(src / "sub.jsonl", header("app-2", cwd="/w/app/sub/dir", created_at=2_000),
           [user(0, "shadow branches again"), assistant(1, "first answer"),
            assistant(2, "second answer"), checkpoint(3, "summary of shadow work", 0, 2,
                                                      [0, 1, 2])])
    _write(src / "apple.jsonl", header("apple-1", cwd="/w/apple", created_at=3_000),
           [user(0, "shadow branches in apple")])
    _write(src / "env.jsonl", header("env-only", cwd="/w/app", created_at=4_000),
           [user(0, "AGENTS.md says: mind the shadow branches", kind="plugin",
                 plugin="agents-md"), user(1, "hello")])
    _write(src / "long.jsonl", header(LONG, cwd=LONG_CWD, created_at=5_000),
           [user(0, "shadow branches far away")])
    data_dir = root / "data"
    assert invoke(data_dir, "ingest", str(src)).exit_code == 0
    return data_dir


def invoke(data_dir: Path, *args: str, stdin: str | None = None) -> Any:
    return CliRunner().invoke(main, ["--data-dir", str(data_dir), *args], input=stdin)


def ids(data_dir: Path, *args: str) -> list[str]:
    result = invoke(data_dir, "search", *args, "--json")
    assert result.exit_code == 0, result.output
    return [i["header"]["id"] for i in json.loads(result.stdout)["items"]]


# --- item 4: search for people --------------------------------------------------------------------

def test_unquoted_words_are_the_phrase(data: Path) -> None:
    quoted = invoke(data, "search", "shadow branches", "--json")
    unquoted = invoke(data, "search", "shadow", "branches", "--json")
    assert unquoted.exit_code == 0 and unquoted.stdout == quoted.stdout
    assert len(json.loads(quoted.stdout)["items"]) == 5
    within = invoke(data, "events", "app-1", "shadow", "branches", "--json")
    assert within.stdout == invoke(data, "events", "app-1", "shadow branches", "--json").stdout
    assert invoke(data, "search", "branches", "shadow", "--json").stdout != quoted.stdout


def test_cwd_is_a_directory_and_everything_below_it(data: Path) -> None:
    assert sorted(ids(data, "shadow", "--cwd", "/w/app")) == sorted([LONG, "app-1", "app-2",
                                                                       "env-only"])
    assert ids(data, "shadow", "--cwd", "/w/app/") == ids(data, "shadow", "--cwd", "/w/app")
    assert ids(data, "shadow", "--cwd", "/w/app/sub") == ["app-2"]
    assert ids(data, "shadow", "--cwd", "/w/apple") == ["apple-1"]  # not a subdirectory
    assert sorted(ids(data, "shadow", "--cwd", "/")) == sorted(ids(data, "shadow"))
    assert cwd_tree_bounds("C:\\Users\\me\\") == ("C:\\Users\\me", "C:\\Users\\me\\",
                                                  "C:\\Users\\me]")
    assert cwd_tree_bounds("/") == ("/", "/", "0")


def test_no_injected_leaves_out_what_the_person_did_not_write(data: Path) -> None:
    assert "env-only" in ids(data, "shadow")
    kept = ids(data, "shadow", "--no-injected")
    assert "env-only" not in kept and "app-1" in kept
    # the compaction summary stays: it is what the session was about
    events = invoke(data, "events", "app-2", "shadow", "work", "--no-injected", "--json")
    assert [h["seq"] for h in json.loads(events.stdout)["items"]] == [3]
    inj = invoke(data, "events", "app-1", "environment_context", "--no-injected", "--json")
    assert json.loads(inj.stdout)["items"] == []


def test_a_tool_call_is_shown_once_and_the_json_keeps_both(data: Path) -> None:
    raw = json.loads(invoke(data, "events", "app-1", "git", "branch", "--json").stdout)
    assert sorted(h["type"] for h in raw["items"]) == ["assistant/message", "tool/call"]
    human = invoke(data, "events", "app-1", "git", "branch").stdout.splitlines()
    assert human[1].startswith("1. seq 2 assistant/message + seq 3 tool/call | ")
    assert not [line for line in human if line.startswith("2.")]


def test_events_takes_the_session_from_the_request(data: Path) -> None:
    request = json.dumps({"sessionId": "app-2", "query": "answer"})
    result = invoke(data, "events", "--request", "-", "--json", stdin=request)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session"]["id"] == "app-2"
    # with the session in the request, the words are the query
    words = invoke(data, "events", "--request", "-", "second", "answer", "--json",
                   stdin=json.dumps({"sessionId": "app-2"}))
    assert [h["seq"] for h in json.loads(words.stdout)["items"]] == [2]
    missing = invoke(data, "events")
    assert missing.exit_code == 2 and "name the session" in missing.output


# --- item 3: short session ids -------------------------------------------------------------------

def test_prefixes_resolve_and_ambiguity_lists_the_sessions(data: Path) -> None:
    full = invoke(data, "show", "app-2", "1", "--json").stdout
    assert invoke(data, "show", "app-2", "1", "--json").exit_code == 0
    ambiguous = invoke(data, "show", "app-", "1")
    assert ambiguous.exit_code == 1
    assert ambiguous.stderr.startswith("error RECALL_AMBIGUOUS_SESSION: session id 'app-' is "
                                       "ambiguous: it matches 2 sessions: app-1, app-2")
    assert json.loads(invoke(data, "show", "app-", "1", "--json").stdout)["error"]["code"] == (
        "RECALL_AMBIGUOUS_SESSION")
    assert invoke(data, "show", "env", "1", "--json").stdout == invoke(
        data, "show", "env-only", "1", "--json").stdout
    assert invoke(data, "show", "nobody", "1").exit_code == 1
    assert full  # the full id still works, at no extra cost
    assert ids(data, "shadow", "--session", "appl") == ["apple-1"]


def test_a_bare_uuid_names_the_agent_session_not_its_subagents(tmp_path: Path) -> None:
    uuid = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    real = Path(__file__).resolve().parents[3] / "data" / "realdata"
    data_dir = tmp_path / "data"
    assert invoke(data_dir, "ingest", str(real / "claude-code-1.0.98-sidechains.jsonl")
                  ).exit_code == 0
    surface = invoke(data_dir, "surface", uuid, "--json")
    assert json.loads(surface.stdout)["session"]["id"] == f"claude-code:{uuid}"
    prefix = invoke(data_dir, "trace", uuid[:8], "--json")  # main session and two subagents
    assert json.loads(prefix.stdout)["error"]["code"] == "RECALL_AMBIGUOUS_SESSION"
    sub = invoke(data_dir, "trace", f"{uuid}/agent-60", "--json")
    assert json.loads(sub.stdout)["session"]["parentSession"] == f"claude-code:{uuid}"


# --- item 5: human views ------------------------------------------------------------------------

def test_piped_output_is_one_record_per_line_with_full_values(data: Path) -> None:
    listing = invoke(data, "sessions").stdout.splitlines()
    assert len(listing) == 6  # the column names and five sessions
    row = next(line for line in listing if line.startswith(LONG))
    assert LONG_CWD in row and row.rstrip().endswith("shadow branches far away")
    search = invoke(data, "search", "far", "away").stdout.splitlines()
    assert search[0] == f"1. {LONG} — shadow branches far away"
    assert LONG_CWD in search[1]
    ingest = invoke(data, "ingest", str(data)).stdout.splitlines()
    assert ingest[0].endswith("rejected")  # the summary line is whole


def test_cursors_are_printed_whole_in_a_narrow_terminal(data: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=screen, force_terminal=True, width=40,
                                                highlight=False, soft_wrap=True,
                                                color_system=None))
    result = invoke(data, "search", "shadow", "--limit", "1")
    assert result.exit_code == 0
    cursor = json.loads(invoke(data, "search", "shadow", "--limit", "1", "--json").stdout)[
        "nextCursor"]
    assert f"more: --cursor {cursor}\n" in screen.getvalue()


def test_show_is_a_transcript_with_raw_only_on_request(tmp_path: Path) -> None:
    real = Path(__file__).resolve().parents[3] / "data" / "realdata"
    data_dir = tmp_path / "data"
    invoke(data_dir, "ingest", str(real / "claude-code-2.1.14-compaction.jsonl"))
    session = "839b35f7"
    shown = invoke(data_dir, "show", session, "30", "--before", "1", "--after", "1")
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("session claude-code:839b35f7-4dbd-4d93-9772-3c272cc87caa")
    assert any(line.startswith("▶ seq 30 · ") and "[shadowed]" in line for line in lines)
    assert any(line.startswith("─ seq 29 · ") for line in lines)
    assert any(line.startswith("    ") for line in lines)  # the text, indented
    assert '"raw"' not in shown.stdout
    plain = json.loads(invoke(data_dir, "show", session, "30", "--json").stdout)
    full = json.loads(invoke(data_dir, "show", session, "30", "--json", "--raw").stdout)
    assert "raw" not in plain["event"]["event"]["data"] and "raw" in full["event"]["event"]["data"]
    assert {k: v for k, v in full["event"]["event"]["data"].items() if k != "raw"} == (
        plain["event"]["event"]["data"])
    assert '"raw"' in invoke(data_dir, "show", session, "30", "--raw").stdout
    surface = invoke(data_dir, "surface", session).stdout.splitlines()
    assert "current surface, captured through seq" in surface[0]
    assert any("compaction summary" in line and "⟲ replaces seqs" in line for line in surface)
    assert '"raw"' not in json.dumps(json.loads(invoke(data_dir, "surface", session,
                                                       "--json").stdout))


def test_trace_is_readable(tmp_path: Path, data: Path) -> None:
    real = Path(__file__).resolve().parents[3] / "data" / "realdata"
    data_dir = tmp_path / "data"
    invoke(data_dir, "ingest", str(real / "claude-code-1.0.98-sidechains.jsonl"))
    lineage = invoke(data_dir, "trace", "fe5e1c67-53e7-4862-81ae-d0e013e3270b").stdout
    assert lineage.splitlines()[:3] == [
        "session claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b — /orchestrator create TODO "
        "app by Next.js", "ancestors (nearest first):", "  - none (a root session)"]
    assert "descendants:\n  - claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b/agent-" in lineage
    event = invoke(data, "trace", "app-2", "1").stdout
    assert "replaced by: seq 3" in event and "▶ seq 1 · assistant [shadowed]" in event


def test_shadowed_lines_are_dimmed_and_markers_name_the_replaced_seqs() -> None:
    shadowed = views.entry_lines(assistant(5, "old text"), "shadowed")
    assert all(line.style == "dim" for line in shadowed)
    current = views.entry_lines(checkpoint(9, "summary", 2, 7, [2]), "current")
    assert str(current[0]).startswith("─ seq 9 · compaction summary [current]")
    assert str(current[0]).endswith("⟲ replaces seqs 2–7")
    injected = views.entry_lines(user(1, "x", kind="plugin", plugin="agents-md"), None)
    assert "injected (agents-md)" in str(injected[0])
    hostile = views.entry_lines(user(1, "a\x1b[31mred\u202e"), None)
    assert "\x1b" not in "".join(str(line) for line in hostile)


def test_ingest_progress_shows_bytes_rate_and_time_left(tmp_path: Path) -> None:
    files = []
    for n in range(3):
        path = tmp_path / f"s{n}.jsonl"
        path.write_bytes(b"x" * 5000)
        files.append(path)
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=120, color_system=None)
    with ingest_progress(terminal, [tmp_path], True) as report:
        assert report is not None
        report(1, 3)
        report(3, 3)
    drawn = screen.getvalue()
    assert "15.0 kB" in drawn and "3/3 files" in drawn and "/s" in drawn
    piped = Console(file=io.StringIO())
    with ingest_progress(piped, [tmp_path], True) as quiet:
        assert quiet is None


def test_references_take_short_ids_and_refuse_ambiguous_ones(data: Path) -> None:
    dry = invoke(data, "reference", "--target", "env", "--source", "appl", "--message", "see",
                 "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    refs = json.loads(dry.stdout)["additionalContext"]["source"]["references"]
    assert [r["sessionId"] for r in refs] == ["apple-1"]
    ambiguous = invoke(data, "reference", "--target", "env", "--source", "app-", "--message",
                       "see", "--dry-run", "--json")
    assert json.loads(ambiguous.stdout)["error"]["code"] == "RECALL_AMBIGUOUS_SESSION"
    assert ambiguous.exit_code == 1
