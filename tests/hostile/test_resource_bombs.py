"""Tiny inputs that once exhausted time or memory: a zstd file of millions of blank lines (a
one-line-at-a-time split, quadratic in a decoded piece), and paths that are no files at all —
`/dev/zero` grows without end, a FIFO's open waits for a writer forever, a socket cannot be
read — which ingest now refuses (INGEST_NOT_A_FILE) before reading a byte. Each bound is stated
where it is asserted."""

from __future__ import annotations

import hashlib
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import zstandard
from datadirs import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.errors import INGEST_NOT_A_FILE
from streams.facade import Recall
from streams.ingest.sourcefile import _first_long_line, read_source

HEADER = b'{"type":"session","version":0,"id":"blank","createdAt":1,"cwd":"/w"}\n'


def _zst(path: Path, data: bytes) -> Path:
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return path


def test_a_zst_of_blank_lines_is_split_in_linear_time(tmp_path: Path) -> None:
    path = _zst(tmp_path / "blank.jsonl.zst", b"\n" * (16 << 20))
    assert path.stat().st_size < 2048
    started = time.monotonic()
    src = read_source(path, max_line=4 << 20, max_total=1 << 30)
    # bound: 16 MiB of blank lines in under 3 s (the old split took > 600 s for 8 MiB)
    assert time.monotonic() - started < 3.0
    assert src.text == b"\n" * (16 << 20) and not src.oversized


def test_an_ingest_of_a_blank_line_bomb_finishes_and_holds_the_lock_briefly(
        tmp_path: Path) -> None:
    path = _zst(tmp_path / "blank.jsonl.zst", HEADER + b"\n" * (8 << 20))
    started = time.monotonic()
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest([path])
    # bound: 20 s for the whole ingest of 8 MiB of blank lines
    assert time.monotonic() - started < 20.0
    assert report.sessions == {"blank"} and report.rejected == 0


def _reference(data: bytes, max_line: int) -> tuple[bytes, list[int]]:
    """What the splitter must give: every line over the cap blanked, and their numbers."""
    lines = data.split(b"\n")
    tail = lines.pop()
    out, long = [], []
    for number, line in enumerate(lines, start=1):
        out.append(b"" if len(line) > max_line else line)
        if len(line) > max_line:
            long.append(number)
    text = b"".join(x + b"\n" for x in out)
    if len(tail) > max_line:
        long.append(len(lines) + 1)
    else:
        text += tail
    return text, long


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=60), max_line=st.integers(1, 24),
       tail=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_the_split_keeps_and_blanks_exactly_the_lines_it_should(
        tmp_path_factory: pytest.TempPathFactory, lengths: list[int], max_line: int,
        tail: int, seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(b"x" * n + b"\n" for n in lengths) + b"y" * tail
    path = tmp_path_factory.mktemp("split") / "f.jsonl.zst"
    # small frames: the decoder hands over pieces of every size
    cut = sorted(rng.sample(range(len(data) + 1), min(6, len(data) + 1)))
    frames = [data[a:b] for a, b in zip([0, *cut], [*cut, len(data)], strict=True)]
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(f) for f in frames))
    src = read_source(path, max_line=max_line, max_total=1 << 20)
    text, long = _reference(data, max_line)
    assert src.text == text
    assert sorted(src.oversized) == long


@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=50),
       max_line=st.integers(1, 20))
def test_the_first_long_line_is_found_as_a_scan_would(lengths: list[int], max_line: int) -> None:
    data = b"".join(b"x" * n + b"\n" for n in lengths)
    first = data.find(b"\n")
    last = len(data) - 1
    expected, at = -1, first + 1
    for n in lengths[1:]:
        if n > max_line:
            expected = at
            break
        at += n + 1
    assert _first_long_line(data, first + 1, last, max_line) == expected


# --- paths that are no files ----------------------------------------------------------------------


def _ingest_cli(data: Path, target: Path) -> tuple[int, dict[str, object]]:
    run = subprocess.run([sys.executable, "-m", "streams", "--data-dir", str(data), "ingest",
                          str(target), "--json"], capture_output=True, cwd=ROOT, timeout=60)
    return run.returncode, orjson.loads(run.stdout)


def _refused(report: dict[str, object], target: Path) -> None:
    unreadable = report["unreadable"]
    assert isinstance(unreadable, list) and len(unreadable) == 1
    assert unreadable[0]["code"] == INGEST_NOT_A_FILE
    assert INGEST_NOT_A_FILE in unreadable[0]["error"]
    assert report["sessions"] == 0 or report["sessions"] == []


def test_a_link_to_dev_zero_is_refused_before_any_read(tmp_path: Path) -> None:
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    started = time.monotonic()
    _, report = _ingest_cli(tmp_path / "data", link)
    # bound: refused at once (reading it grew to 23 GB)
    assert time.monotonic() - started < 30.0
    _refused(report, link)


def test_a_fifo_named_as_a_log_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    _, report = _ingest_cli(tmp_path / "data", fifo)  # the old open waited forever: timeout
    _refused(report, fifo)


def test_a_socket_named_as_a_log_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        with Recall.open(tmp_path / "data") as recall:
            report = recall.ingest([path])
        assert [u["code"] for u in report.unreadable] == [INGEST_NOT_A_FILE]
    finally:
        server.close()


def test_devices_fifos_and_sockets_in_a_walked_folder_are_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(folder / "pipe.jsonl")
    (folder / "real.jsonl").write_bytes(HEADER)
    with Recall.open(tmp_path / "data") as recall:
        report = recall.ingest([folder])
    assert report.sessions == {"blank"}


# --- many long malformed lines --------------------------------------------------------------------

#: Runs the CLI and records its own peak RSS (VmHWM) in the file named first.
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


def _peak_kib(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[bytes], int]:
    peak = tmp_path / "peak"
    run = subprocess.run([sys.executable, "-c", PEAK, str(peak), *args], capture_output=True,
                         cwd=ROOT, timeout=300)
    return run, int(peak.read_text())


def test_long_malformed_lines_park_as_bounded_records_and_list_in_bounded_memory(
        tmp_path: Path) -> None:
    line = b'{"type":"user/message","seq":0,' + b"x" * ((1 << 20) - 40) + b"\n"
    path = tmp_path / "malformed.jsonl.zst"
    with path.open("wb") as raw, zstandard.ZstdCompressor(level=19).stream_writer(raw) as out:
        out.write(HEADER)
        for _ in range(300):
            out.write(line)
    assert path.stat().st_size < 64 << 10
    data = tmp_path / "data"
    run, peak = _peak_kib(tmp_path, "--data-dir", str(data), "ingest", str(path), "--json")
    assert run.returncode == 0 and orjson.loads(run.stdout)["rejected"] == 300, run.stderr
    # bounds: the 300 MiB of lines are not copied into the dead letters (it was 402 MB) ...
    assert (data / "dead-letter.jsonl").stat().st_size < 1 << 20
    assert peak < 1 << 20  # ... and the ingest stays under 1 GiB of RSS (it took 1.9 GB)
    listed, peak = _peak_kib(tmp_path, "--data-dir", str(data), "dead-letters", "--json")
    assert listed.returncode == 0 and peak < 200 << 10  # listing under 200 MiB (it took 1.3 GB)
    with Recall.open(data) as recall:
        records = recall.dead_letters()
    assert len(records) == 300
    digest = hashlib.blake2b(line[:-1], digest_size=32).hexdigest()
    for record in records:
        assert record["bytes"] is None and record["length"] == len(line) - 1
        assert record["digest"] == digest and record["line"] >= 2  # found again by its line


# --- long substring queries -----------------------------------------------------------------------


@pytest.mark.parametrize("chars", [1_001, 120_000, 1_000_000])
def test_a_long_substring_query_is_refused_in_bounded_time_and_memory(tmp_path: Path,
                                                                      chars: int) -> None:
    data = tmp_path / "data"
    text = "ab" * 5000
    with Recall.open(data, substring=True) as recall:
        recall.create_session("long", cwd="/w")
        recall.append_events("long", [{"type": "user/message", "surfaceOp": "append", "data": {
            "role": "user", "content": [{"type": "text", "text": text}]}}])
    request = tmp_path / "request.json"  # (a megabyte does not fit in one argument)
    request.write_bytes(orjson.dumps({"query": ("ab" * chars)[:chars], "mode": "substring"}))
    started = time.monotonic()
    run, peak = _peak_kib(tmp_path, "--data-dir", str(data), "search", "--request",
                          str(request), "--json")
    # bounds: 30 s and 300 MiB of RSS (a 120 KB query took 1.9 GB; 1 MB ran out of memory)
    assert time.monotonic() - started < 30.0 and peak < 300 << 10
    assert run.returncode == 1
    assert orjson.loads(run.stdout)["error"]["code"] == "RECALL_QUERY_TOO_LONG"
