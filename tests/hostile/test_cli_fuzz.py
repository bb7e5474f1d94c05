"""Hostile command lines: random argv (commands, options, undecodable bytes, huge and negative
integers, markup, control characters, random --request JSON) through the real `recall` group.
Whatever the input, no Python exception escapes the CLI's error edge: the exit status is 0, 1 or
2, `--json` output is JSON (an `{"error": {"code", "message"}}` object when it failed), and no
failure is RECALL_INTERNAL_ERROR (that would be a bug the edge had to catch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from datadirs import SAMPLES
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from streams.faces.cli.main import main

SESSION = "ci-billing-2025-11-24"
TEXTS = ["", " ", "EUR", "Traceback", SESSION, "ci-followup-2025-12-01", "\udcff", "a\udcffb",
         "x[/bold]", "[link=http://e]x[/link]", "\x1b[31m", "\n", "\x00", "-", "--", "*", "\"",
         "OR", "搜索", "9223372036854775808", "-1", "1e400", "2025-11-24T16:00:00Z",
         "2025-13-45", "0" * 400]
INTS = ["0", "1", "-1", "50", "51", str(2**53), str(2**63), str(2**64), "-9223372036854775809",
        "abc", ""]
COMMANDS: list[tuple[list[str], list[str]]] = [
    (["search"], ["--surface", "--type", "--session", "--cwd", "--since", "--until", "--limit",
                  "--cursor", "--substring", "--snapshot"]),
    (["events", SESSION], ["--surface", "--type", "--since", "--until", "--limit", "--cursor",
                           "--substring"]),
    (["sessions"], []),
    (["surface"], []),
    (["show", SESSION], ["--before", "--after"]),
    (["trace"], []),
    (["reference", "--dry-run", "--target", "ci-followup-2025-12-01"],
     ["--message", "--source", "--message-id"]),
    (["candidates"], ["--target", "--limit"]),
    (["dead-letters"], []),
    (["index", "digest"], []),
    (["index", "stats"], []),
    (["index", "check"], []),
    (["ingest"], ["--format"]),
    (["nonsense"], ["--what"]),
]
FLAGS = {"--substring", "--snapshot", "--dry-run"}
NUMERIC = {"--limit", "--before", "--after"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["query", "limit", "cursor", "mode", "sessionFilters", "eventFilters",
                         "kind", "values", "from", "to", "consistency", "sessionId", "x"]),
        inner, max_size=5),
    max_leaves=20)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()  # orjson refuses ints past 64 bits


@st.composite
def argv(draw: st.DrawFn) -> tuple[list[str], bytes | None]:
    words, options = draw(st.sampled_from(COMMANDS))
    args = list(words)
    for _ in range(draw(st.integers(0, 3))):
        args.append(draw(st.sampled_from(TEXTS + INTS)))
    for option in draw(st.lists(st.sampled_from(options), max_size=3)) if options else []:
        args.append(option)
        if option not in FLAGS:
            args.append(draw(st.sampled_from(INTS if option in NUMERIC else TEXTS)))
    stdin = None
    if words[0] in ("search", "events") and draw(st.booleans()):
        args += ["--request", "-"]
        body = _dumps(draw(json_values)) if draw(st.booleans()) else draw(st.binary(
            max_size=60))
        stdin = body
    if words[0] == "ingest" and draw(st.booleans()):
        args.append(str(SAMPLES / "ci-billing.jsonl"))
    if draw(st.booleans()):
        args.append("--json")
    return args, stdin


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clifuzz") / "data"
    result = CliRunner().invoke(main, ["--data-dir", str(root), "ingest", str(SAMPLES)])
    assert result.exit_code == 0
    return root


def _check(result: Any, args: list[str]) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, result.exception)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    options = args[:args.index("--")] if "--" in args else args  # after "--": arguments
    if "--json" not in options:
        assert "RECALL_INTERNAL_ERROR" not in result.stderr, (args, result.stderr)
        return
    if result.exit_code == 0 and args[0] != "index":
        orjson.loads(result.stdout)
        return
    if result.exit_code != 0 and result.stdout.strip().startswith('{\n  "error"'):
        error = orjson.loads(result.stdout)["error"]
        assert set(error) == {"code", "message"}
        assert error["code"] != "RECALL_INTERNAL_ERROR", (args, error)


@FUZZ
@given(argv())
def test_random_command_lines_never_escape_the_error_edge(data: Path,
                                                           case: tuple[list[str], bytes | None]
                                                           ) -> None:
    args, stdin = case
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args], input=stdin)
    _check(result, args)


@FUZZ
@given(st.binary(max_size=300) | json_values.map(lambda v: _dumps(v)))
def test_random_request_json_never_escapes(data: Path, body: bytes) -> None:
    for command in (["search"], ["events", SESSION]):
        args = [*command, "--request", "-", "--json"]
        result = CliRunner().invoke(main, ["--data-dir", str(data), *args], input=body)
        _check(result, args)
        if result.exit_code != 0:
            assert orjson.loads(result.stdout)["error"]["code"]


@pytest.mark.parametrize("args", [["ingest", "\x00"], ["watch", "a\x00b"], ["ingest", "--json", "\x00"]])
def test_a_nul_byte_in_a_path_is_a_usage_error(data: Path, args: list[str]) -> None:
    """Found by the fuzz on CI: os.stat raised ValueError inside click (RECALL_INTERNAL_ERROR)."""
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args])
    assert result.exit_code == 2, result.output
    assert "RECALL_USAGE" in result.output and "NUL byte" in result.output
    assert "RECALL_INTERNAL_ERROR" not in result.output
