"""Hostile input through the ingest edge: hypothesis mutates the real Claude Code and Codex logs
in tests/data and the native sample logs (byte flips, cuts, deleted/duplicated/swapped lines,
junk lines, type-confused values, huge integers, repeated keys, deep nesting, lost newlines,
zstd packing and truncation) and ingests the result. Whatever the mutation:

- no exception escapes `Recall.ingest`;
- the accounting balances: linesRead = ingested + duplicatesSkipped + parked + pending, and for a
  plain file read line by line, linesRead is its number of non-blank lines;
- every parked record is intact: a line's bytes equal that line of the source, a whole file's
  bytes equal the file on disk, a bounded record's digest matches the source's bytes;
- ingesting the same files again adds nothing (no duplicate dead letters, no events).

This tests the edge's containment, not the importers' mapping (an importer that raises is
parked as INGEST_IMPORTER_FAILED, which satisfies the properties)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import orjson
import zstandard
from datadirs import REALDATA, SAMPLES, dead_letters, parked_bytes
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from streams.facade import Recall

#: The agents whose logs start with a header line a native log could be taken for (Pi), or
#: have none at all (Kimi CLI), beside the Claude Code and Codex logs and the native samples.
NEWER = [REALDATA.parent / "agents" / "pi" / "before-compaction.jsonl",
         REALDATA.parent / "agents" / "kimi-cli" / "00d5060aaec3fda180930ea52304b87b"
         / "d8447fa8-9d8e-41af-9fc6-a12e4a196b6c.jsonl"]
SOURCES = sorted(REALDATA.glob("*.jsonl")) + sorted(SAMPLES.glob("*.jsonl")) + NEWER
WHOLE_FILE = {"INGEST_UNSUPPORTED_FORMAT", "INGEST_CORRUPT_COMPRESSION", "INGEST_FILE_TOO_LARGE",
              "INGEST_IMPORTER_FAILED", "INGEST_REWRITTEN_SOURCE"}
HOSTILE_VALUES: list[Any] = [
    [1], {"a": [1]}, ["x"], None, True, 0, -1, 2**53 - 1, 1.5, "", "x" * 3000,
    "\x1b[31m\n\u202e", {"type": ["list"]}, [[[[[]]]]], {"": {}},
]
RAW_VALUES = [b"18446744073709551616", b"-9007199254740993", b"1e400", b"[" * 200 + b"]" * 200]


def _splice_value(value: Any, path: list[Any], replacement: Any) -> Any:
    if not path:
        return replacement
    key, rest = path[0], path[1:]
    if (isinstance(value, dict) and key in value) or (isinstance(value, list) and isinstance(key, int) and key < len(value)):
        value[key] = _splice_value(value[key], rest, replacement)
    return value


def _paths(value: Any, prefix: list[Any], out: list[list[Any]], depth: int = 0) -> None:
    out.append(prefix)
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in list(value.items())[:12]:
            _paths(v, [*prefix, k], out, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            _paths(v, [*prefix, i], out, depth + 1)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    source = draw(st.sampled_from(SOURCES))
    lines = source.read_bytes().split(b"\n")
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["flip", "cut", "delete", "duplicate", "swap", "junk", "confuse",
                                   "raw", "dupkey", "deep"]))
        line = lines[i]
        if op == "flip" and line:
            j = draw(st.integers(0, len(line) - 1))
            lines[i] = line[:j] + bytes([draw(st.integers(0, 255))]) + line[j + 1:]
        elif op == "cut":
            lines[i] = line[:draw(st.integers(0, len(line)))]
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "junk":
            lines.insert(i, draw(st.binary(max_size=200)).replace(b"\n", b" "))
        elif op in ("confuse", "raw"):
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            paths: list[list[Any]] = []
            _paths(value, [], paths)
            path = draw(st.sampled_from(paths))
            marker = "\x00splice\x00"
            replacement = draw(st.sampled_from(HOSTILE_VALUES)) if op == "confuse" else marker
            try:  # orjson writes at most 254 levels: a "deep" line read back cannot be rewritten
                text = orjson.dumps(_splice_value(value, path, replacement))
            except TypeError:
                continue
            lines[i] = text if op == "confuse" else text.replace(
                orjson.dumps(marker), draw(st.sampled_from(RAW_VALUES)), 1)
        elif op == "dupkey" and line.startswith(b"{"):
            lines[i] = b'{"type":"x",' + line[1:]
        elif op == "deep":
            lines.insert(i, b'{"type":"vendor/x","seq":1,"time":1,"data":' + b"[" * 300
                         + b"]" * 300 + b"}")
    data = b"\n".join(lines)
    if draw(st.booleans()):
        data = data.rstrip(b"\n")  # a lost final newline, or a cut last line
    name = "rollout-fuzz.jsonl" if "codex" in source.name else f"fuzz-{source.stem}.jsonl"
    packing = draw(st.sampled_from(["plain", "plain", "zstd", "zstd-cut"]))
    if packing != "plain":
        data = zstandard.ZstdCompressor().compress(data)
        name += ".zst"
        if packing == "zstd-cut":
            data = data[:draw(st.integers(0, len(data)))]
    return name, data


def _decompressed(data: bytes) -> bytes:
    if not data.startswith(b"\x28\xb5\x2f\xfd"):
        return data
    frame = zstandard.ZstdDecompressor().decompressobj()
    out = b""
    for i in range(0, len(data), 512):
        try:
            out += frame.decompress(data[i:i + 512])
        except zstandard.ZstdError:
            break
    return out


def _check_intact(letter: dict[str, Any], files: dict[str, bytes]) -> None:
    raw = files[letter["source"]]
    text = _decompressed(raw)
    kept = parked_bytes(letter)
    if kept is None:  # bounded: the digest names the source's bytes
        span = text[letter["offset"]:letter["offset"] + letter["length"]]
        if letter["code"] in WHOLE_FILE:
            span = raw
        assert hashlib.blake2b(span, digest_size=32).hexdigest() == letter["digest"]
    elif letter["code"] in WHOLE_FILE:
        assert kept == raw
    elif letter["line"] >= 1:
        line = text.split(b"\n")[letter["line"] - 1]
        assert kept in (line, line.rstrip(b"\r")), letter
    elif kept != text:  # (else a whole document that does not parse, kept as it is)
        # an imported event the fold refused: the event the importer made, as JSON
        assert isinstance(orjson.loads(kept), dict)


@FUZZ
@given(st.lists(mutated(), min_size=1, max_size=3))
def test_mutated_logs_never_escape_and_always_add_up(files: list[tuple[str, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs = root / "in"
        inputs.mkdir()
        on_disk: dict[str, bytes] = {}
        for n, (name, data) in enumerate(files):
            path = inputs / f"{n}-{name}"
            path.write_bytes(data)
            on_disk[str(path.resolve())] = data
        with Recall.open(root / "data", shards=1) as recall:
            report = recall.ingest([inputs]).to_json()
            acc = report["accounting"]
            assert acc["balanced"], report
            letters = dead_letters(root / "data")
            assert len(letters) == report["deadLettersAdded"]
            for letter in letters:
                _check_intact(letter, on_disk)
            whole = sum(1 for x in letters if x["code"] in WHOLE_FILE)
            if whole == 0 and all(not d.startswith(b"\x28\xb5\x2f\xfd") for _, d in files):
                lines = sum(1 for _, d in files for line in d.split(b"\n") if line.strip())
                assert acc["linesRead"] == lines, report
            again = recall.ingest([inputs]).to_json()
        assert again["deadLettersAdded"] == 0 and again["eventsAdded"] == 0
        assert again["unchanged"] + len(again["rewritten"]) + again["rejectedByCode"].get(
            "INGEST_IMPORTER_FAILED", 0) == len(files)
