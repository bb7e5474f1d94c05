"""Hostile copies of the real excerpts (issue 13 item 3): type-confused fields, deleted keys,
truncated JSON, non-object records. No exception escapes any importer, every session it returns
folds, and every record of the file is either in the log (`data.raw`) or parked with its
original bytes. `RECALL_FUZZ_EXAMPLES` raises the example count for a longer run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from importer_support import (
    AIDER,
    CC_215,
    CC_1098,
    CC_2114,
    CODEX,
    CONTINUE,
    COPILOT,
    COPILOT_COMPACTION,
    COPILOT_LEGACY,
    GEMINI_2025,
    GEMINI_JSONL,
    GEMINI_MAIN,
    KIMI,
    OPENCODE_CHILD,
    OPENCODE_ERROR,
    OPENHANDS,
    PI,
    ROO_API,
    ROO_UI,
    agent,
    assert_valid_log,
    load,
)

from streams.ingest.importers import IMPORTERS, ImportedSession

EXAMPLES = int(os.environ.get("RECALL_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONFUSED: list[Any] = [[1], {}, 1, None, "x", True, [[1]], {"a": [1]}, -1, 1.5, "", [], 2**53]

JSONL = [("claude-code", CC_1098), ("claude-code", CC_2114), ("claude-code", CC_215),
         ("codex", CODEX), ("gemini-cli-jsonl", GEMINI_JSONL), ("copilot-cli", COPILOT),
         ("copilot-cli", COPILOT_COMPACTION), ("pi", PI), ("kimi-cli", KIMI)]
DOCUMENTS = [("gemini-cli", GEMINI_MAIN, "messages"), ("gemini-cli", GEMINI_2025, "messages"),
             ("copilot-cli-legacy", COPILOT_LEGACY, "timeline"),
             ("opencode", OPENCODE_ERROR, "messages"), ("opencode", OPENCODE_CHILD, "messages"),
             ("continue", CONTINUE, "history"),
             ("roo-code", ROO_UI, None), ("roo-code-api", ROO_API, None),
             ("openhands", OPENHANDS, None)]  # None: a JSON array


def _read(name: str) -> bytes:
    return load(name) if name in (CC_1098, CC_2114, CC_215, CODEX) else agent(name)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*at, index))


def _mutate(draw: st.DrawFn, value: Any) -> Any:
    """One change somewhere inside `value`: a value of another type, or a deleted key."""
    paths = [p for p in _paths(value) if p]
    if not paths:
        return draw(st.sampled_from(CONFUSED))
    path = draw(st.sampled_from(paths))
    value = orjson.loads(orjson.dumps(value))
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(st.sampled_from(CONFUSED))
    return value


@st.composite
def hostile_lines(draw: st.DrawFn, data: bytes) -> tuple[bytes, set[int]]:
    """A JSONL copy with 1–3 lines changed; also the numbers of lines that no longer parse."""
    lines = data.split(b"\n")
    numbered = [i for i, line in enumerate(lines) if line.strip()]
    broken: set[int] = set()
    for index in draw(st.lists(st.sampled_from(numbered), min_size=1, max_size=3, unique=True)):
        how = draw(st.sampled_from(["confuse", "confuse", "truncate", "scalar"]))
        if how == "truncate":
            cut = draw(st.integers(1, max(1, len(lines[index]) - 1)))
            lines[index] = lines[index][:cut]
            broken.add(index + 1)
        elif how == "scalar":
            lines[index] = orjson.dumps(draw(st.sampled_from(CONFUSED)))
        else:
            lines[index] = orjson.dumps(_mutate(draw, orjson.loads(lines[index])))
    return b"\n".join(lines), broken


def _kept(sessions: list[ImportedSession]) -> tuple[list[bytes], dict[int, bytes]]:
    raws = [orjson.dumps(e["data"]["raw"], option=orjson.OPT_SORT_KEYS)
            for s in sessions for e in s.events if "raw" in e["data"]]
    parked = {r.line: r.raw for s in sessions for r in s.rejections}
    return raws, parked


def _import(fmt: str, data: bytes, name: str) -> list[ImportedSession]:
    sessions = IMPORTERS[fmt](data, name)  # must not raise
    for session in sessions:
        assert_valid_log(session)
    return sessions


@pytest.mark.parametrize(("fmt", "name"), JSONL)
@FUZZ
@given(st.data())
def test_every_line_is_imported_or_parked(fmt: str, name: str, draws: st.DataObject) -> None:
    hostile, _ = draws.draw(hostile_lines(_read(name)))
    sessions = _import(fmt, hostile, "/h/.copilot/session-state/x/events.jsonl")
    raws, parked = _kept(sessions)
    for number, line in enumerate(hostile.split(b"\n"), start=1):
        if not line.strip():
            continue
        if number in parked:
            assert parked[number] == line  # the original bytes, whole
            continue
        value = orjson.loads(line)
        assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) in raws, number


@pytest.mark.parametrize(("fmt", "name", "records"), DOCUMENTS)
@FUZZ
@given(st.data())
def test_every_document_record_is_imported_or_parked(fmt: str, name: str, records: str | None,
                                                     draws: st.DataObject) -> None:
    doc = orjson.loads(_read(name))
    items = doc[records] if records is not None else doc
    for _ in range(draws.draw(st.integers(1, 3))):
        index = draws.draw(st.integers(0, len(items) - 1))
        items[index] = _mutate(draws.draw, items[index])
    sessions = _import(fmt, orjson.dumps(doc), "/x/chats/ses_x.json")
    raws, parked = _kept(sessions)
    kept = [orjson.loads(r) for r in [*raws, *parked.values()]]
    ids = {k.get("id") for k in kept if isinstance(k, dict) and isinstance(k.get("id"), str)}
    wrapped = [k.get("info") for k in kept if isinstance(k, dict)]
    for item in items:
        parts = [item]
        if fmt == "opencode" and isinstance(item, dict):  # its info, then its parts
            found = item.get("parts")
            parts = [item.get("info"), *(found if isinstance(found, list) else [])]
        for part in parts:
            assert part in kept or part in wrapped or (
                isinstance(part, dict) and part.get("id") in ids), part


@pytest.mark.parametrize(("fmt", "name"), [(f, n) for f, n, _ in DOCUMENTS] + [("aider",
                                                                              AIDER)])
@FUZZ
@given(st.data())
def test_a_truncated_or_garbled_file_is_parked_whole(fmt: str, name: str,
                                                     draws: st.DataObject) -> None:
    data = _read(name)
    cut = draws.draw(st.integers(1, len(data) - 1))
    garbled = data[:cut] + draws.draw(st.sampled_from([b"", b"\xff\xfe", b"\x00", b"}]"]))
    sessions = _import(fmt, garbled, "/x/.aider.chat.history.md")
    if fmt == "aider":
        raws, parked = _kept(sessions)
        assert raws or parked or not garbled.strip()
        return
    try:
        orjson.loads(garbled)
    except orjson.JSONDecodeError:
        (session,) = sessions
        assert session.events == []
        assert [r.raw for r in session.rejections] == [garbled]


def test_issue_13_examples_import_the_rest_of_the_file() -> None:
    """The two reported crashes (`TypeError: unhashable type`, 0 sessions ingested)."""
    claude = [orjson.loads(line) for line in load(CC_1098).splitlines()]
    claude[0] = {**claude[0], "summary": [1]}
    codex = [orjson.loads(line) for line in load(CODEX).splitlines()]
    item = next(i for i, r in enumerate(codex) if r["type"] == "response_item")
    codex[item] = {**codex[item], "payload": {**codex[item]["payload"], "type": ["message"]}}
    for fmt, lines, clean in (("claude-code", claude, load(CC_1098)),
                              ("codex", codex, load(CODEX))):
        data = b"".join(orjson.dumps(r) + b"\n" for r in lines)
        sessions = _import(fmt, data, "x.jsonl")
        reference = IMPORTERS[fmt](clean, "x.jsonl")
        assert [s.header for s in sessions] == [s.header for s in reference]
        assert sum(len(s.events) for s in sessions) >= sum(
            len(s.events) for s in reference) - 2
    # The Codex item is parked whole; the Claude summary is kept (not a title).
    codex_sessions = IMPORTERS["codex"](b"".join(orjson.dumps(r) + b"\n" for r in codex), "x")
    (parked,) = codex_sessions[0].rejections
    assert parked.line == item + 1 and orjson.loads(parked.raw) == codex[item]
