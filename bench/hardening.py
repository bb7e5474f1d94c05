"""Hostile-input benchmark (issue: hardening). `python -m bench hardening`.

What the protections cost, against baselines measured in the same run (ratios; this 2-core
machine is shared, so absolute times vary):
- `hardening_parse_us_per_line` / `hardening_orjson_us_per_line` / `hardening_parse_ratio`:
  the lossless JSON edge (projections/codec.loads_lossless) against a bare `orjson.loads`, over
  every line of the real Claude Code / Codex excerpts in tests/data/realdata (repeated 50×).
- `hardening_read_mb_per_s` / `hardening_plain_read_mb_per_s` / `hardening_read_ratio`: the
  capped source reader (streams/sourcefile.read_source: chunked reads, zstd in 512-byte steps,
  per-line cap, prefix hashes) against `read_bytes()` + one-shot zstd decompression, over a
  ~60 MB native log compressed with zstd (decompressed MB per second).
- `hardening_lock_us_per_batch`: one `runtime.writing()` round (flock acquire, epoch token
  replaced, release) — the fixed cost per batch a watcher pays.
- `hardening_bomb_s` / `hardening_bomb_peak_mb` / `hardening_bomb_dead_letter_bytes`: `recall
  ingest` (own process) of a 16 KB zstd file holding one 512 MB line: wall time, the process's
  peak RSS (VmHWM) and the dead-letter file it leaves (one bounded record). Before this work:
  18.9 s, 2,491 MB, 715,828,086 bytes on the same machine.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import zstandard

from projections import codec
from streams.core.settings import load_settings
from streams.ingest.sourcefile import read_source

ROOT = Path(__file__).resolve().parents[1]
REALDATA = ROOT / "tests" / "data" / "realdata"
PEAK = """
import sys
from streams.faces.cli.main import main
out = sys.argv.pop(1)
try:
    main()
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    open(out, "w").write(hwm)
"""


def _parse() -> dict[str, Any]:
    lines = [line for p in sorted(REALDATA.glob("*.jsonl"))
             for line in p.read_bytes().splitlines() if line] * 50
    start = time.perf_counter()
    for line in lines:
        orjson.loads(line)
    bare = time.perf_counter() - start
    start = time.perf_counter()
    for line in lines:
        codec.loads_lossless(line)
    strict = time.perf_counter() - start
    return {"hardening_parse_us_per_line": round(strict / len(lines) * 1e6, 2),
            "hardening_orjson_us_per_line": round(bare / len(lines) * 1e6, 2),
            "hardening_parse_ratio": round(strict / bare, 2)}


def _read(tmp: Path) -> dict[str, Any]:
    header = b'{"type":"session","version":0,"id":"r","createdAt":1}\n'
    body = b"".join(orjson.dumps({"type": "user/message", "seq": i, "time": i, "data": {
        "text": f"line {i} " + "lorem ipsum dolor sit amet " * 8}}) + b"\n"
        for i in range(300_000))
    path = tmp / "big.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(header + body))
    mb = (len(header) + len(body)) / 1e6
    start = time.perf_counter()
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes()),
                                                        read_across_frames=True)
    plain = len(reader.read())
    baseline = time.perf_counter() - start
    start = time.perf_counter()
    src = read_source(path, max_line=4 << 20, max_total=1 << 30)
    capped = time.perf_counter() - start
    assert src.total == plain
    return {"hardening_read_mb_per_s": round(mb / capped, 1),
            "hardening_plain_read_mb_per_s": round(mb / baseline, 1),
            "hardening_read_ratio": round(baseline / capped, 2)}


def _lock(tmp: Path) -> dict[str, Any]:
    from streams.runtime.embedded.runtime import EmbeddedRuntime

    runtime = EmbeddedRuntime(load_settings(data_dir=tmp / "lock", shards=1))
    try:
        rounds = 300
        start = time.perf_counter()
        for _ in range(rounds):
            with runtime.writing():
                pass
        elapsed = time.perf_counter() - start
    finally:
        runtime.close()
    return {"hardening_lock_us_per_batch": round(elapsed / rounds * 1e6, 1)}


def _bomb(tmp: Path) -> dict[str, Any]:
    bomb = tmp / "bomb.jsonl.zst"
    chunk = b"A" * (1 << 20)
    with bomb.open("wb") as raw, zstandard.ZstdCompressor(level=19).stream_writer(raw) as out:
        out.write(b'{"type":"session","version":0,"id":"bomb","createdAt":1}\n{"a":"')
        for _ in range(512):
            out.write(chunk)
        out.write(b'"}\n')
    data, peak = tmp / "bomb-data", tmp / "peak"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PEAK, str(peak), "--data-dir", str(data), "ingest",
                    str(bomb), "--json"], check=True, capture_output=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    return {"hardening_bomb_s": round(elapsed, 2),
            "hardening_bomb_peak_mb": round(int(peak.read_text()) / 1024),
            "hardening_bomb_dead_letter_bytes": (data / "dead-letter.jsonl").stat().st_size,
            "hardening_bomb_file_bytes": bomb.stat().st_size}


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        results.update(_parse())
        results.update(_read(tmp))
        results.update(_lock(tmp))
        results.update(_bomb(tmp))
    return results
