"""Importer benchmark corpus: the real excerpts of tests/data/realdata/, replicated and varied.

Deterministic (no randomness beyond blake2b of fixed strings) and cached under
$RECALL_BENCH_DIR (default /tmp/recall-bench) with a marker file, like bench/search_corpus.py.

How one generated file is made from one excerpt (Claude Code files cycle over the three Claude
Code excerpts; Codex files all come from the Codex excerpt):
- the excerpt's body is repeated R = 1..6 times (R from a hash of the file index), so file sizes
  vary from one excerpt (50–107 KB) to six (~640 KB), and sessions are longer than the excerpts;
- every UUID gets a fresh deterministic value: the session's own id(s) (Claude `sessionId`,
  Codex `session_meta.payload.id`) once per file, every other UUID (record uuids, parents,
  sidechain agents, leafUuids, Codex thread ids of spawned agents, turn ids) once per repetition;
- tool/message/request ids (`toolu_…`, `msg_…`, `req_…`, `call_…`) get a per-repetition suffix, so
  a repeated tool call is a new call;
- every ISO-8601 UTC timestamp is shifted: by 3 h per file, plus (excerpt span + 60 s) per
  repetition, so time moves forward through a file;
- repetition r > 0 continues the chain: its first main-chain Claude record's `parentUuid` points
  at the last main-chain record of repetition r - 1 (the importer sees one long session, not a
  fork); for Codex the `session_meta` line is written once, at the top.
Files: Claude Code `claude/projects/-home-dev-project<k>/<session uuid>.jsonl`, Codex
`codex/sessions/rollout-<date>-<thread uuid>.jsonl` (the importers' own naming conventions).
"""

from __future__ import annotations

import datetime
import hashlib
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.search_corpus import bench_dir

REALDATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "realdata"
CLAUDE_EXCERPTS = ("claude-code-1.0.98-sidechains.jsonl", "claude-code-2.1.14-compaction.jsonl",
                   "claude-code-2.1.5-compaction.jsonl")
CODEX_EXCERPTS = ("codex-0.125-parent.jsonl",)
MAX_REPS = 6
#: Bump when the generation rules change (the cache key includes it).
VERSION = 2

_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TOKEN = re.compile(rb"\b(?:toolu_|msg_|req_|call_)[A-Za-z0-9]{12,}")
_ISO = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,6})?Z")
_PREV = b"__bench_prev_parent__"


def _iso_ms(match: re.Match[bytes]) -> int:
    base = datetime.datetime.fromisoformat(match.group(1).decode()).replace(
        tzinfo=datetime.UTC)
    frac = match.group(2) or b""
    return int(base.timestamp()) * 1000 + (int((frac[1:] + b"000")[:3]) if frac else 0)


def _fmt_ms(ms: int, frac: bool) -> bytes:
    dt = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += f".{ms % 1000:03d}"
    return (text + "Z").encode()


def new_uuid(*parts: object) -> str:
    h = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=16).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True)
class Excerpt:
    name: str
    head: list[bytes]       # written once per file (Codex session_meta)
    body: list[bytes]       # repeated
    session_ids: frozenset[bytes]
    first_main: int | None  # body index of the first main-chain Claude record (with a uuid)
    last_main_uuid: bytes | None
    span_ms: int

    @classmethod
    def load(cls, name: str) -> Excerpt:
        lines = [ln for ln in (REALDATA / name).read_bytes().splitlines() if ln.strip()]
        values = [orjson.loads(ln) for ln in lines]
        head: list[bytes] = []
        sids: set[bytes] = set()
        if values and values[0].get("type") == "session_meta":
            head, lines, values = lines[:1], lines[1:], values[1:]
            sids.add(str(orjson.loads(head[0])["payload"]["id"]).encode())
        first_main = None
        last_main = None
        for i, v in enumerate(values):
            if isinstance(v.get("sessionId"), str):
                sids.add(v["sessionId"].encode())
            if isinstance(v.get("uuid"), str) and v.get("isSidechain") is not True:
                if first_main is None:
                    first_main = i
                last_main = v["uuid"].encode()
        stamps = [_iso_ms(m) for ln in head + lines for m in _ISO.finditer(ln)]
        span = (max(stamps) - min(stamps)) if stamps else 0
        return cls(name, head, lines, frozenset(sids), first_main, last_main, span)


class _Mapper:
    """The id/timestamp rewrite of one (file, repetition)."""

    def __init__(self, excerpt: Excerpt, seed: int, file_index: int, rep: int,
                 shift_ms: int) -> None:
        self.excerpt = excerpt
        self.key = (seed, file_index)
        self.rep = rep
        self.shift_ms = shift_ms
        self.suffix = f"B{file_index:05d}R{rep}".encode()
        self.cache: dict[bytes, bytes] = {}

    def uuid(self, old: bytes) -> bytes:
        got = self.cache.get(old)
        if got is None:
            if old in self.excerpt.session_ids:
                got = new_uuid(*self.key, "session", old.decode()).encode()
            else:
                got = new_uuid(*self.key, self.rep, old.decode()).encode()
            self.cache[old] = got
        return got

    def line(self, raw: bytes) -> bytes:
        raw = _UUID.sub(lambda m: self.uuid(m.group(0)), raw)
        raw = _TOKEN.sub(lambda m: m.group(0) + self.suffix, raw)
        return _ISO.sub(lambda m: _fmt_ms(_iso_ms(m) + self.shift_ms, m.group(2) is not None),
                        raw)


def render(excerpt: Excerpt, seed: int, file_index: int, reps: int) -> tuple[bytes, str]:
    """(file bytes, the file's main session uuid)."""
    base_shift = file_index * 3 * 3600 * 1000
    out: list[bytes] = []
    prev_last: bytes | None = None
    for rep in range(reps):
        m = _Mapper(excerpt, seed, file_index, rep, base_shift + rep * (excerpt.span_ms + 60_000))
        if rep == 0:
            out.extend(m.line(ln) for ln in excerpt.head)
        for i, ln in enumerate(excerpt.body):
            if rep > 0 and i == excerpt.first_main and prev_last is not None:
                value = orjson.loads(ln)
                value["parentUuid"] = _PREV.decode()
                ln = m.line(orjson.dumps(value)).replace(_PREV, prev_last)
            else:
                ln = m.line(ln)
            out.append(ln)
        if excerpt.last_main_uuid is not None:
            prev_last = m.uuid(excerpt.last_main_uuid)
    main = next(iter(sorted(excerpt.session_ids)), b"none")
    sid = new_uuid(seed, file_index, "session", main.decode())
    return b"\n".join(out) + b"\n", sid


@dataclass(frozen=True)
class RealCorpus:
    root: Path
    files: list[Path]
    bytes: int


def _reps(seed: int, file_index: int) -> int:
    h = hashlib.blake2b(f"{seed}:reps:{file_index}".encode(), digest_size=4).digest()
    return 1 + int.from_bytes(h, "big") % MAX_REPS


def ensure_real_corpus(fmt: str, target_mb: float, seed: int = 5) -> RealCorpus:
    """`fmt` = "claude-code" or "codex": files totalling ≥ target_mb MB (10^6 bytes), cached."""
    names = CLAUDE_EXCERPTS if fmt == "claude-code" else CODEX_EXCERPTS
    target = int(target_mb * 1_000_000)
    root = bench_dir() / f"realcorpus-v{VERSION}-{fmt}-s{seed}-{target}"
    marker = root / "complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        excerpts = [Excerpt.load(n) for n in names]
        total = 0
        i = 0
        while total < target:
            excerpt = excerpts[i % len(excerpts)]
            data, sid = render(excerpt, seed, i, _reps(seed, i))
            if fmt == "claude-code":
                path = root / "claude" / "projects" / f"-home-dev-project{i % 10}" / f"{sid}.jsonl"
            else:
                day = datetime.date(2026, 1, 1) + datetime.timedelta(days=i % 365)
                path = root / "codex" / "sessions" / f"rollout-{day}T10-00-00-{sid}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            total += len(data)
            i += 1
        marker.write_text("ok\n")
        print(f"  (generated {i} {fmt} files, {total / 1e6:.1f} MB in "
              f"{time.perf_counter() - start:.1f} s at {root})", file=sys.stderr, flush=True)
    files = sorted(p for p in root.rglob("*.jsonl"))
    return RealCorpus(root, files, sum(p.stat().st_size for p in files))
