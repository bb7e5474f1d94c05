"""A zstd bomb (a small frame decoding to one huge line) is read in bounded memory: decompression
is capped per line (RECALL_MAX_EVENT_BYTES: the line is hashed as it streams past and parked as a
bounded record) and per file (RECALL_MAX_FILE_BYTES). Memory is asserted, never time (bench/
measures time)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import orjson
import zstandard
from datadirs import ROOT, dead_letters, recall_env

from streams.facade import Recall

LINE = 256 << 20
#: Runs the CLI and records its own peak RSS (VmHWM: this process image only, not the forking
#: parent's pages that rusage of a child would include).
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


def _bomb(path: Path) -> str:
    """A native log whose second line is LINE bytes; returns that line's blake2b-256."""
    digest = hashlib.blake2b(digest_size=32)
    head = b'{"type":"session","version":0,"id":"bomb","createdAt":1,"cwd":"/w"}\n'
    chunk = b"A" * (1 << 20)
    with path.open("wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        out.write(head)
        first = b'{"type":"user/message","seq":0,"time":2,"data":"'
        out.write(first)
        digest.update(first)
        for _ in range(LINE // len(chunk) - 1):
            out.write(chunk)
            digest.update(chunk)
        last = b"A" * (len(chunk) - len(first) - 2) + b'"}'
        out.write(last + b"\n")
        digest.update(last)
    return digest.hexdigest()


def test_a_one_line_bomb_becomes_a_bounded_record_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.jsonl.zst"
    expected = _bomb(bomb)
    assert bomb.stat().st_size < 64 << 10
    data = tmp_path / "data"
    peak = tmp_path / "peak"
    done = subprocess.run([sys.executable, "-c", PEAK, str(peak), "--data-dir", str(data),
                           "ingest", str(bomb), "--json"], capture_output=True, cwd=ROOT,
                          env=recall_env())
    assert done.returncode == 0, done.stderr
    assert int(peak.read_text()) < 200 * 1024  # KiB; the line alone is 256 MiB
    report = orjson.loads(done.stdout)
    assert report["rejectedByCode"] == {"INGEST_OVERSIZED_EVENT": 1}
    assert report["accounting"]["balanced"]
    assert (data / "dead-letter.jsonl").stat().st_size < 4096
    [letter] = dead_letters(data)
    assert letter["bytes"] is None and letter["length"] == LINE
    assert letter["digest"] == expected and letter["line"] == 2
    assert letter["offset"] == 68


def test_a_file_over_the_total_cap_is_read_up_to_it(tmp_path: Path) -> None:
    lines = [b'{"type":"session","version":0,"id":"big","createdAt":1,"cwd":"/w"}']
    lines += [orjson.dumps({"type": "vendor/x", "seq": i, "time": 2 + i, "ignorable": True,
                            "data": "x" * 900}) for i in range(200)]
    src = tmp_path / "big.jsonl.zst"
    src.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))
    with Recall.open(tmp_path / "data", max_file_bytes=50_000) as recall:
        report = recall.ingest([src]).to_json()
    assert report["rejectedByCode"] == {"INGEST_FILE_TOO_LARGE": 1}
    assert 0 < report["eventsAdded"] < 200 and report["accounting"]["balanced"]
    [letter] = dead_letters(tmp_path / "data")
    assert letter["bytes"] is not None  # the compressed file is small: kept whole
