"""Importers of other agents (issue 20). `python -m bench agents`.

Measures `import_mb_per_s_<format>` for every importer added with the registry (Gemini CLI JSON
and JSONL, Copilot CLI events and legacy JSON, OpenCode, Aider, Pi, Continue, Roo Code, Kimi CLI,
OpenHands; Crush reads a database by path, not bytes, and is not timed here), and the Claude
Code importer's rate on its own corpus in the same run, so `import_ratio_vs_claude_code_<format>` (goal ≥ 0.5:
within 2× of Claude Code) compares like with like on this noisy shared machine: each format's
passes alternate with passes of the Claude Code baseline, and its ratio is against those
(`agents_import_mb_per_s_claude_code_baseline` is the baseline timed alone at the start).

Corpus, per format: TARGET_MB × RECALL_BENCH_SCALE (MB = 10^6 bytes) of files made in memory from
the real excerpts in tests/data/agents: each file repeats its excerpt's records R = 1..6 times
(R from the file index), every id-like field (`id`, `callID`, `toolCallId`, `messageID`, …) and
the session id suffixed per repetition/file, so no record is a revision of another. Aider files
repeat the history's runs with their start times shifted. Claude Code uses the cached real
corpus of bench/realcorpus.py. Generation is not timed.

Timed: the importer alone over bytes already in memory (parsing, mapping to native events, the
schema and fold check every event passes in the importer; Aider's events skip the walk for
unsafe numbers and the importer's fold, since its data holds no parsed JSON and every event only
appends: `Emitter(plain_appends=True)`; the store still folds every event at ingest, which is not
timed here for any format), best of 5 passes. Also reported: events/s and events per MB, because
the cost is per event and formats differ in how many events a megabyte holds (Aider's many small blocks — prompts, short replies,
runs of status lines — make it the densest).
"""

from __future__ import annotations

import copy
import gc
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.realcorpus import ensure_real_corpus
from bench.search_corpus import scale
from streams.ingest.importers import IMPORTERS

TARGET_MB = 25.0
PASSES = 5  # the best of five: three left the ratios swinging by a third on a busy host
AGENTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "agents"
_ID_KEYS = frozenset({"id", "callID", "callId", "toolCallId", "messageID", "messageId",
                      "parentID", "sessionID", "interactionId", "turnId"})

Blob = tuple[str, bytes]


def _suffixed(value: Any, suffix: str) -> Any:
    """A copy with every id-like string field made unique by `suffix`."""
    if isinstance(value, dict):
        return {k: (v + suffix if k in _ID_KEYS and isinstance(v, str) else _suffixed(v, suffix))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_suffixed(v, suffix) for v in value]
    return value


def _reps(index: int) -> int:
    return 1 + (index * 7919) % 6


def _document(name: str, records: str, session: Callable[[dict[str, Any], str], None]
              ) -> Iterator[Blob]:
    doc = orjson.loads((AGENTS / name).read_bytes())
    index = 0
    while True:
        out = copy.deepcopy(doc)
        session(out, f"-f{index}")
        out[records] = [_suffixed(item, f"-f{index}r{r}") for r in range(_reps(index))
                        for item in doc[records]]
        yield f"{index}-{Path(name).name}", orjson.dumps(out, option=orjson.OPT_INDENT_2)
        index += 1


def _lines(name: str, head: Callable[[dict[str, Any]], bool],
           session: Callable[[dict[str, Any], str], dict[str, Any]]) -> Iterator[Blob]:
    values = [orjson.loads(line) for line in (AGENTS / name).read_bytes().splitlines()]
    index = 0
    while True:
        out = [session(v, f"-f{index}") for v in values if head(v)]
        out += [_suffixed(v, f"-f{index}r{r}") for r in range(_reps(index)) for v in values
                if not head(v)]
        yield f"{index}-{Path(name).name}", b"".join(orjson.dumps(v) + b"\n" for v in out)
        index += 1


def _array(name: str) -> Iterator[Blob]:
    """A document that is a JSON array of records (Roo Code, OpenHands); each file's folder or
    name tells its session."""
    items = orjson.loads((AGENTS / name).read_bytes())
    index = 0
    while True:
        out = [_suffixed(item, f"-f{index}r{r}") for r in range(_reps(index)) for item in items]
        yield f"{index}/{Path(name).name}", orjson.dumps(out)
        index += 1


def _aider() -> Iterator[Blob]:
    text = (AGENTS / "aider-0.85" / ".aider.chat.history.md").read_text()
    index = 0
    while True:
        parts = []
        for r in range(_reps(index)):
            year = 2000 + index % 90
            parts.append(re.sub(r"started at \d{4}-(\d\d)-\d\d",
                                lambda m, r=r, y=year: f"started at {y}-{m.group(1)}-{r + 1:02d}",
                                text))
        yield f"{index}/.aider.chat.history.md", "".join(parts).encode("utf-8")
        index += 1


def _gemini_session(doc: dict[str, Any], suffix: str) -> None:
    doc["sessionId"] += suffix


def _opencode_session(doc: dict[str, Any], suffix: str) -> None:
    doc["info"] = {**doc["info"], "id": doc["info"]["id"] + suffix}


def _legacy_session(doc: dict[str, Any], suffix: str) -> None:
    doc["sessionId"] += suffix


def _continue_session(doc: dict[str, Any], suffix: str) -> None:
    doc["sessionId"] += suffix


def _pi_session(value: dict[str, Any], suffix: str) -> dict[str, Any]:
    return {**value, "id": value["id"] + suffix}


def _jsonl_session(value: dict[str, Any], suffix: str) -> dict[str, Any]:
    value = copy.deepcopy(value)
    if "sessionId" in value:
        value["sessionId"] += suffix
    if isinstance(value.get("data"), dict) and "sessionId" in value["data"]:
        value["data"]["sessionId"] += suffix
    return value


SOURCES: dict[str, Callable[[], Iterator[Blob]]] = {
    "gemini_cli": lambda: _document(
        "gemini-cli-0.34/session-2026-03-18T01-46-50316244.json", "messages", _gemini_session),
    "gemini_cli_jsonl": lambda: _lines(
        "gemini-cli-2026-04.jsonl", lambda v: "sessionId" in v and "id" not in v,
        _jsonl_session),
    "copilot_cli": lambda: _lines(
        "copilot-cli-1.0.34-events.jsonl", lambda v: v.get("type") == "session.start",
        _jsonl_session),
    "copilot_cli_legacy": lambda: _document(
        "copilot-cli-2025-10-legacy.json", "timeline", _legacy_session),
    "opencode": lambda: _document(
        "opencode/ses_20be19bd6ffeHn5B6DdBVxU8TR.json", "messages", _opencode_session),
    "aider": _aider,
    "pi": lambda: _lines("pi/before-compaction.jsonl", lambda v: v.get("type") == "session",
                         _pi_session),
    "continue": lambda: _document("continue/5d3764fb-da1f-4d6b-b170-9a6601afa210.json",
                                  "history", _continue_session),
    "roo_code": lambda: _array(
        "roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/ui_messages.json"),
    "roo_code_api": lambda: _array(
        "roo-code/ac8aa7b4-319c-4925-a139-4f4adca81921/api_conversation_history.json"),
    "kimi_cli": lambda: _lines(
        "kimi-cli/00d5060aaec3fda180930ea52304b87b/d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl",
        lambda v: False, _jsonl_session),
    "openhands": lambda: _array("openhands/basic_gui_mode.json"),
}
FORMAT_OF = {"gemini_cli": "gemini-cli", "gemini_cli_jsonl": "gemini-cli-jsonl",
             "copilot_cli": "copilot-cli", "copilot_cli_legacy": "copilot-cli-legacy",
             "opencode": "opencode", "aider": "aider", "pi": "pi", "continue": "continue",
             "roo_code": "roo-code", "roo_code_api": "roo-code-api", "kimi_cli": "kimi-cli",
             "openhands": "openhands"}


def corpus(short: str, target_bytes: float) -> list[Blob]:
    blobs: list[Blob] = []
    size = 0
    for name, data in SOURCES[short]():
        blobs.append((name, data))
        size += len(data)
        if size >= target_bytes:
            return blobs
    return blobs


def _pass(fmt: str, blobs: list[Blob]) -> tuple[float, int]:
    """(seconds, events) of one importer over in-memory files, once."""
    importer = IMPORTERS[fmt]
    gc.collect()
    events = 0
    rejected = 0
    start = time.perf_counter()
    for name, data in blobs:
        for session in importer(data, f"/bench/{name}"):
            events += len(session.events)
            rejected += len(session.rejections)
    seconds = time.perf_counter() - start
    if rejected:
        raise RuntimeError(f"{fmt} corpus: the importer rejected {rejected} records")
    return seconds, events


def rate(fmt: str, blobs: list[Blob]) -> tuple[float, int, float]:
    """(MB/s and events/s of the best of PASSES, events per pass) of one importer over
    in-memory files."""
    mb = sum(len(d) for _, d in blobs) / 1e6
    best, events = min(_pass(fmt, blobs) for _ in range(PASSES))
    return mb / best, events, events / best


def paired(fmt: str, blobs: list[Blob], baseline: list[Blob]) -> tuple[float, int, float, float]:
    """`rate` of `fmt`, with the Claude Code baseline's passes alternating with its passes (the
    load of this shared machine drifts within a minute: a baseline timed before all formats
    made the last format's ratio swing 3x between runs): (MB/s, events, events/s, baseline MB/s)."""
    mb = sum(len(d) for _, d in blobs) / 1e6
    base_mb = sum(len(d) for _, d in baseline) / 1e6
    best = base_best = float("inf")
    events = 0
    for _ in range(PASSES):
        base_best = min(base_best, _pass("claude-code", baseline)[0])
        seconds, events = _pass(fmt, blobs)
        best = min(best, seconds)
    return mb / best, events, events / best, base_mb / base_best


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    target = TARGET_MB * scale() * 1e6
    claude = ensure_real_corpus("claude-code", TARGET_MB * scale())
    baseline_blobs = [(p.name, p.read_bytes()) for p in claude.files]
    baseline, _, baseline_events = rate("claude-code", baseline_blobs)
    results["agents_import_mb_per_s_claude_code_baseline"] = round(baseline, 1)
    results["agents_import_events_per_s_claude_code_baseline"] = round(baseline_events)
    for short, fmt in FORMAT_OF.items():
        blobs = corpus(short, target)
        mb_per_s, events, events_per_s, base = paired(fmt, blobs, baseline_blobs)
        mb = sum(len(d) for _, d in blobs) / 1e6
        results[f"agents_corpus_mb_{short}"] = round(mb, 1)
        results[f"agents_corpus_events_per_mb_{short}"] = round(events / mb)
        results[f"import_mb_per_s_{short}"] = round(mb_per_s, 1)
        results[f"import_events_per_s_{short}"] = round(events_per_s)
        results[f"import_ratio_vs_claude_code_{short}"] = round(mb_per_s / base, 2)
    return results
