"""Hostile arguments, files and settings never give a Python traceback: each is a coded error.
`--json` prints `{"error": {"code", "message"}}`, a person gets one line with the code and the
next step; exit 2 means the invocation was not understood, exit 1 that it failed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from datadirs import SAMPLES, recall_cmd, recall_env

from streams.faces.cli.main import main

FF = "\udcff"  # how Python hands over an argv byte 0xff that is not UTF-8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "data"
    result = CliRunner().invoke(main, ["--data-dir", str(root), "ingest", str(SAMPLES), "--json"])
    assert result.exit_code == 0
    return root


def run(data: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
        ) -> tuple[int, dict[str, str], str]:
    result = CliRunner().invoke(main, ["--data-dir", str(data), *args, "--json"], input=input,
                                env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.stderr
    return result.exit_code, orjson.loads(result.stdout)["error"], result.stderr


@pytest.mark.parametrize(("args", "status", "code"), [
    (("search", FF), 2, "RECALL_USAGE"),
    (("search", "x", "--type", FF), 2, "RECALL_USAGE"),
    (("reference", "--target", "ci-followup-2025-12-01", "--message", FF), 2, "RECALL_USAGE"),
    (("show", "ci-billing-2025-11-24", "9223372036854775808"), 1,
     "SESSION_QUERY_EVENT_NOT_FOUND"),
    (("show", "ci-billing-2025-11-24", "0", "--before", str(2**70)), 1,
     "SESSION_QUERY_INVALID_WINDOW"),
    (("search", "x", "--limit", str(2**64)), 1, "SESSION_QUERY_INVALID_LIMIT"),
    (("search", "Traceback", "--cursor", ""), 1, "SESSION_QUERY_INVALID_CURSOR"),
])
def test_hostile_arguments_are_coded_errors(data: Path, args: tuple[str, ...], status: int,
                                            code: str) -> None:
    got_status, error, _ = run(data, *args)
    assert (got_status, error["code"]) == (status, code)


@pytest.mark.parametrize("request_json", [
    b'{"query":"x","eventFilters":[{"kind":"time","from":9223372036854775808}]}',
    b"{bad", b"[1]", b'"text"', b"",
])
def test_bad_request_files_are_usage_errors(data: Path, request_json: bytes) -> None:
    status, error, _ = run(data, "search", "--request", "-", input=request_json)
    assert status == 2 and error["code"] == "RECALL_USAGE"


def test_a_request_time_bound_of_2_63_from_python_is_a_filter_error(data: Path) -> None:
    from projections.errors import SessionQueryError
    from streams.facade import Recall

    with Recall.open(data) as recall, pytest.raises(SessionQueryError) as caught:
        recall.search_sessions(request={"query": "x", "eventFilters": [
            {"kind": "time", "from": 2**63}]})
    assert caught.value.code == "SESSION_QUERY_INVALID_FILTER"


def test_damaged_files_in_the_data_dir_are_coded(tmp_path: Path, data: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    (copy / "sources.json").write_bytes(b"{")
    status, error, _ = run(copy, "ingest", str(SAMPLES))
    assert (status, error["code"]) == (1, "RECALL_STORE_CORRUPT")
    with (copy / "dead-letter.jsonl").open("ab") as f:
        f.write(b'{"source":"x","li')
    result = CliRunner().invoke(main, ["--data-dir", str(copy), "dead-letters", "--json"])
    assert result.exit_code == 0 and orjson.loads(result.stdout)[-1]["code"] == \
        "RECALL_STORE_CORRUPT"
    store = sorted((copy / "store").glob("*.jsonl"))[0]
    with store.open("ab") as f:
        f.write(b"garbage\n")
    status, error, _ = run(copy, "replay")
    assert (status, error["code"]) == (1, "RECALL_STORE_CORRUPT")
    assert store.name in error["message"]


def test_bad_settings_are_config_errors(tmp_path: Path, data: Path) -> None:
    status, error, _ = run(data, "sessions", env={"RECALL_SHARDS": "abc"})
    assert (status, error["code"]) == (2, "RECALL_CONFIG_INVALID")
    assert "RECALL_SHARDS" in error["message"]
    # a value the index refuses is refused as a setting (it passed, then crashed the worker's
    # index and query roles in a restart loop)
    status, error, _ = run(data, "sessions", env={"RECALL_SNAPSHOT_RETENTION_S": "0"})
    assert (status, error["code"]) == (2, "RECALL_CONFIG_INVALID")
    assert "RECALL_SNAPSHOT_RETENTION_S" in error["message"]
    a_file = tmp_path / "file"
    a_file.write_bytes(b"")
    status, error, _ = run(a_file, "sessions")
    assert (status, error["code"]) == (2, "RECALL_CONFIG_INVALID")


def test_real_argv_bytes_and_human_output(tmp_path: Path, data: Path) -> None:
    """Through a real process: undecodable argv bytes, one line for a person, no traceback."""
    done = recall_cmd(data, "search", b"\xff")
    assert done.returncode == 2 and b"Traceback" not in done.stderr + done.stdout
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("error RECALL_USAGE: ") and "next:" in line
    done = recall_cmd(data, "sessions", env=recall_env(RECALL_SHARDS="abc"))
    assert done.returncode == 2 and done.stderr.decode().startswith("error RECALL_CONFIG_INVALID")


@pytest.mark.parametrize(("request_json", "message"), [
    # found by the CLI fuzzer: a null filter list in --request plus a filter option raised
    # TypeError (RECALL_INTERNAL_ERROR); null means no filters, as without the option
    (b'{"sessionFilters": null}', "cwd-tree filter values must be non-empty strings"),
    (b'{"eventFilters": null}', "cwd-tree filter values must be non-empty strings"),
    # a value that is not an array is the request's own error, whatever the options add
    (b'{"sessionFilters": 5}', "filters must be an array"),
])
def test_filter_options_merge_with_any_request_file(data: Path, request_json: bytes,
                                                   message: str) -> None:
    status, error, _ = run(data, "search", "x", "--cwd", "", "--surface", "current",
                           "--request", "-", input=request_json)
    assert (status, error["code"]) == (1, "SESSION_QUERY_INVALID_FILTER")
    assert message in error["message"]


def test_a_null_filter_list_in_the_request_file_takes_the_options_filters(data: Path) -> None:
    result = CliRunner().invoke(main, ["--data-dir", str(data), "search", "EUR", "--cwd",
                                       "/home/dev/shop", "--request", "-", "--json"],
                                input=b'{"sessionFilters": null, "eventFilters": null}')
    assert result.exit_code == 0, result.output
    items = orjson.loads(result.stdout)["items"]
    assert items and all(i["header"]["cwd"] == "/home/dev/shop" for i in items)
