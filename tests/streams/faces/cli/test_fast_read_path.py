"""`recall search` and `recall sessions` on the entry point's fast path print exactly what the
full CLI prints (stdout, stderr, exit status) for a matrix of queries, options, settings and
errors; the command lines it does not take go to the full CLI; and it loads none of pydantic,
rich, click, asyncio, detect-secrets, pathlib or threading."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from factories import assistant, header, user

from streams.faces.cli import fast
from streams.faces.cli.main import main

ROOT = Path(__file__).resolve().parents[4]
#: Each entry point as a script named `recall` (click names the program after argv[0]).
FAST = "from streams.faces.cli.entry import main\nmain()\n"
FULL = "from streams.faces.cli.main import main\nmain()\n"
HEAVY = ("pydantic", "pydantic_settings", "rich", "click", "asyncio", "detect_secrets",
         # orjson's own import costs a short read more than all its JSON work; hashlib loads
         # OpenSSL (projections.hashing digests without it); tempfile pulls in random, shutil
         "orjson", "hashlib", "tempfile",
         # pathlib and threading cost a short read more than their work: its paths are
         # strings, its locks threading's own types from _thread (indexer/locks.py)
         "pathlib", "threading")


def _write(path: Path, head: dict[str, Any], events: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in [head, *events]))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fastpath")
    src = root / "src"
    src.mkdir()
    _write(src / "a.jsonl", header("app-1", cwd="/w/app", created_at=1_000),
           [user(0, "why do the shadow branches pile up?"),
            assistant(1, "Nothing deletes the shadow branches.")])
    _write(src / "b.jsonl", header("app-2", cwd="/w/app/sub", created_at=2_000),
           [user(0, "shadow branches again"), assistant(1, "an answer")])
    _write(src / "c.jsonl", header("wide-1", cwd="/w/日本", created_at=3_000),
           [user(0, "影子 shadow branches\there, with a tab")])
    _write(src / "d.jsonl", header("other-1", cwd="/w/other", created_at=4_000),
           [user(0, "nothing in common")])
    data_dir = root / "data"
    result = CliRunner().invoke(main, ["--data-dir", str(data_dir), "ingest", str(src)])
    assert result.exit_code == 0, result.output
    return data_dir


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("entry")
    out = {}
    for name, text in (("fast", FAST), ("full", FULL)):
        (root / name).mkdir()
        script = root / name / "recall"
        script.write_text(text)
        out[name] = script
    return out


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("RECALL_") and k not in fast._RICH_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _run(script: Path, argv: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, env=env,
                          cwd=ROOT, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


#: Command lines the fast path answers (after --data-dir D).
ANSWERED = [
    ["search", "shadow"],
    ["search", "shadow", "--json"],
    ["search", "shadow", "branches", "--limit", "2"],
    ["search", "--limit=1", "shadow"],
    ["search", "--limit=1", "shadow", "--json"],
    ["search", "zzzz"],
    ["search", "zzzz", "--json"],
    ["search", "影子"],
    ["search", "here"],
    ["sessions"],
    ["sessions", "--json"],
    ["sessions", "--limit", "2"],
    ["sessions", "--cwd", "/w/app"],
    ["sessions", "--agent", "dsh", "--json"],
    ["sessions", "--title", "again"],
    ["sessions", "--title", "zzzz"],
    ["sessions", "--cwd=/w/other", "--limit=1", "--json"],
]
#: Command lines it hands to the full CLI (unsupported forms and errors).
HANDED_OVER = [
    ["search"],
    ["search", ""],
    ["search", "shadow", "--limit", "0"],
    ["search", "shadow", "--limit", "1000"],
    ["search", "shadow", "--limit", "x"],
    ["search", "shadow", "--limit"],
    ["search", "shadow", "--bogus"],
    ["search", "shadow", "--json", "--json"],
    ["search", "--", "-x"],
    ["search", "shadow", "--cursor", "nonsense"],
    ["search", "shadow", "--agent", "dsh"],
    ["sessions", "--limit", "0"],
    ["sessions", "extra"],
    ["sessions", "--help"],
    ["events", "app-1", "shadow"],
]
#: Settings: read alike, or handed over (a bad value is the full CLI's error).
SETTINGS = [
    {"RECALL_DEFAULT_LIMIT": "1"},
    {"RECALL_SNIPPET_CHARS": "12"},
    {"RECALL_SHARDS": "0"},
    {"RECALL_SHARDS": "abc"},
    {"RECALL_SHARDS": "4"},
    {"RECALL_REDACT": "true"},
    {"RECALL_LIVE_WINDOW_MS": "0"},
    {"RECALL_READ_WINDOW_MAX": "-1"},
    {"RECALL_REDACT": "1"},
    {"RECALL_MAX_LIMIT": "0"},
    {"recall_default_limit": "2"},
    {"RECALL_BROKER": "kafka://127.0.0.1:1"},
    {"FORCE_COLOR": "1"},
    {"RECALL_MCP_SESSION": "x"},
]


def _same(scripts: dict[str, Path], argv: list[str], env: dict[str, str]) -> None:
    fast_out = _run(scripts["fast"], argv, env)
    full_out = _run(scripts["full"], argv, env)
    assert fast_out == full_out, argv


@pytest.mark.parametrize("args", ANSWERED + HANDED_OVER, ids=" ".join)
def test_fast_entry_prints_what_the_full_cli_prints(data: Path, scripts: dict[str, Path],
                                                    args: list[str]) -> None:
    _same(scripts, ["--data-dir", str(data), *args], _env({}))


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_settings_give_the_same_answer_on_both_paths(data: Path, scripts: dict[str, Path],
                                                     settings: dict[str, str]) -> None:
    for args in (["search", "shadow"], ["sessions", "--json"]):
        _same(scripts, ["--data-dir", str(data), *args], _env(settings))
    _same(scripts, ["search", "shadow", "--json"], _env({"RECALL_DATA_DIR": str(data),
                                                          **settings}))


def test_a_missing_data_dir_is_left_to_the_full_cli(tmp_path: Path) -> None:
    assert fast.run(["--data-dir", str(tmp_path / "none"), "search", "x"]) is None
    assert not (tmp_path / "none").exists()


def _answer(argv: list[str]) -> int | None:
    with contextlib.redirect_stdout(io.StringIO()):
        return fast.run(argv)


@pytest.mark.parametrize("args", ANSWERED, ids=" ".join)
def test_the_fast_path_answers_its_command_lines(data: Path, args: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RECALL_") or key in fast._RICH_ENV:
            monkeypatch.delenv(key)
    status = _answer(["--data-dir", str(data), *args])
    if args[0] == "sessions" and "--json" not in args and "--title" not in args:
        assert status in (0, None)  # a listing with wide characters: rich measures it
    else:
        assert status == 0


@pytest.mark.parametrize("args", HANDED_OVER, ids=" ".join)
def test_other_command_lines_go_to_the_full_cli(data: Path, args: list[str]) -> None:
    assert _answer(["--data-dir", str(data), *args]) is None


@pytest.mark.parametrize("args", [["search", "again"], ["sessions", "--json"],
                                  ["search", "again", "--json"]], ids=" ".join)
def test_a_fast_read_loads_no_heavy_library(data: Path, args: list[str]) -> None:
    # the entry point itself (main exits without the interpreter's teardown; atexit runs)
    code = ("import atexit, sys\n"
            "from streams.faces.cli.entry import main\n"
            f"atexit.register(lambda: print(sorted(m for m in {HEAVY!r} if m in sys.modules),"
            " file=sys.stderr))\n"
            f"sys.argv = ['recall', '--data-dir', {str(data)!r}, *{args!r}]\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env({}), cwd=ROOT, timeout=120, check=True)
    assert done.stderr.strip() == "[]", done.stdout + done.stderr
