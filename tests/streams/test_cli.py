"""The `recall` CLI: JSON output shapes, error JSON and exit codes, help and docs/cli.md coverage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from distribution import declared_distribution

from streams.faces.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def run(data: Path, *args: str, input: bytes | None = None) -> tuple[int, Any]:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args], input=input)
    try:
        return result.exit_code, orjson.loads(result.stdout)
    except orjson.JSONDecodeError:
        return result.exit_code, result.stdout


@pytest.fixture
def data(tmp_path: Path, samples_dir: Path) -> Path:
    root = tmp_path / "data"
    code, report = run(root, "ingest", str(samples_dir), "--json")
    assert code == 0 and report["sessions"] == 4
    return root


def test_search_json_is_the_spec_page(data: Path) -> None:
    code, page = run(data, "search", "Traceback", "--surface", "shadowed", "--json")
    assert code == 0
    assert set(page) == {"items"}  # nextCursor absent on the last page
    item = page["items"][0]
    assert {"header", "live", "persisted", "bestMatch"} <= set(item)  # PROTOCOL §3.8, plus listing fields
    assert set(item["bestMatch"]) == {"sessionId", "seq", "type", "time", "surface", "snippet"}
    assert item["bestMatch"]["surface"] == "shadowed"


def test_paging_through_cursors_from_the_cli(data: Path) -> None:
    seen: list[tuple[str, int]] = []
    cursor: str | None = None
    while True:
        args = ["events", "ci-billing-2025-11-24", "EUR", "--limit", "1", "--json"]
        code, page = run(data, *args, *(["--cursor", cursor] if cursor else []))
        assert code == 0
        seen += [(h["sessionId"], h["seq"]) for h in page["items"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) >= 4


def test_request_file_takes_the_full_spec_request(data: Path) -> None:
    request = {"query": "EUR", "sessionFilters": [{"kind": "cwd", "values": ["/home/dev/infra"]}]}
    code, page = run(data, "search", "--request", "-", "--json", input=orjson.dumps(request))
    assert code == 0 and page == {"items": []}


def test_errors_print_a_stable_code_and_exit_non_zero(data: Path) -> None:
    code, out = run(data, "search", "   ", "--json")
    assert code == 1 and out["error"]["code"] == "SESSION_QUERY_INVALID_QUERY"
    code, out = run(data, "show", "no-such-session", "0", "--json")
    assert code == 1 and out["error"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    code, out = run(data, "search", "x", "--cursor", "forged", "--json")
    assert code == 1 and out["error"]["code"] == "SESSION_QUERY_INVALID_CURSOR"


def test_reads_surface_show_trace_sessions(data: Path) -> None:
    code, surface = run(data, "surface", "ci-billing-2025-11-24", "--json")
    assert code == 0 and [e["seq"] for e in surface["events"]] == [31, 35, 36]
    code, shown = run(data, "show", "ci-billing-2025-11-24", "7", "--before", "1", "--after",
                      "1", "--json")
    assert code == 0 and shown["event"]["surface"] == "shadowed"
    assert [e["event"]["seq"] for e in shown["before"] + shown["after"]] == [6, 8]
    code, traced = run(data, "trace", "ci-billing-2025-11-24", "7", "--json")
    assert code == 0 and traced["replacementChain"] == [28, 31]
    code, listing = run(data, "sessions", "--json")
    assert code == 0 and listing[0]["header"]["id"] == "ci-followup-2025-12-01"


def test_reference_and_candidates(data: Path) -> None:
    code, rows = run(data, "candidates", "--target", "ci-followup-2025-12-01", "--json")
    assert code == 0 and rows[0]["cwd"] == "/home/dev/shop"
    assert rows[-1]["sessionId"] == "infra-kafka-2025-11-26"
    code, dry = run(data, "reference", "--target", "ci-followup-2025-12-01", "--message", "see",
                    "--source", "ci-billing-2025-11-24=CI", "--dry-run", "--json")
    assert code == 0 and "appended" not in dry
    assert dry["additionalContext"]["source"]["references"][0]["label"] == "CI"
    code, done = run(data, "reference", "--target", "ci-followup-2025-12-01", "--message",
                     f"again {rows[0]['mention']}", "--json")
    assert code == 0 and done["appended"] == [4, 5]
    code, err = run(data, "reference", "--target", "ci-followup-2025-12-01", "--message", "x",
                    "--source", "ci-followup-2025-12-01", "--json")
    assert code == 1 and err["error"]["code"] == "SESSION_REFERENCE_SELF_REFERENCE"


def test_dead_letters_lists_parked_records(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "bad.jsonl").write_bytes(b'{"type":"session","version":0,"id":"b","createdAt":1}\n'
                                     b"{not json}\n")
    code, report = run(tmp_path / "data", "ingest", str(logs), "--json")
    assert code == 0 and report["rejected"] == 1
    code, parked = run(tmp_path / "data", "dead-letters", "--json")
    assert code == 0 and parked[0]["code"] == "INGEST_MALFORMED_JSON"


def test_every_command_has_help_and_is_in_the_cli_reference() -> None:
    reference = (ROOT / "docs" / "cli.md").read_text()
    runner = CliRunner()
    for name, command in main.commands.items():
        assert command.help, f"{name} has no help text"
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, name
        assert f"recall {name}" in reference, f"`recall {name}` is not documented in docs/cli.md"


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["hit"]["surface"] == "shadowed"
    assert summary["hit"]["sessionId"] == "ci-billing-2025-11-24"
    assert summary["reference"]["appended"] == [4, 5]


def test_mcp_without_its_extra_says_what_to_install(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14: without the `mcp` extra, `recall mcp` printed a raw ImportError traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp → ModuleNotFoundError
    for name in [m for m in sys.modules if m.startswith("streams.faces.mcp")]:
        monkeypatch.delitem(sys.modules, name)
    result = CliRunner().invoke(main, ["--data-dir", str(tmp_path / "d"), "mcp"])
    assert result.exit_code == 1, result.output
    assert "RECALL_MISSING_EXTRA" in result.output
    assert f"pip install '{declared_distribution()}[mcp]'" in result.output
    assert "Traceback" not in result.output


def test_semantic_search_needs_vectors_then_finds_by_meaning(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(data, "search", "--semantic", "flaky test", "--json")
    assert code == 1 and "RECALL_SEMANTIC_UNAVAILABLE" in str(out)
    monkeypatch.setenv("RECALL_SEMANTIC", "1")  # the next open rebuilds the index with vectors
    code, page = run(data, "search", "--mode", "semantic", "the CI keeps breaking", "--json")
    assert code == 0 and page["items"]
    code, lexical = run(data, "search", "the CI keeps breaking", "--json")
    assert code == 0 and lexical["items"] == []


def test_semantic_without_its_extra_says_what_to_install(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer import semantic

    monkeypatch.setattr(semantic, "find_spec", lambda name: None)
    result = CliRunner().invoke(main, ["--data-dir", str(data), "search", "--semantic", "x"])
    assert result.exit_code == 1, result.output
    assert "RECALL_MISSING_EXTRA" in result.output
    assert f"pip install '{declared_distribution()}[semantic]'" in result.output
    assert "Traceback" not in result.output
