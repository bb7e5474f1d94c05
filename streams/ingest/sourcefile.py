"""Ingest edge: one source file → its lines, with every cap enforced while reading.

A file is read in chunks and, if it starts with the zstd magic, decompressed frame by frame with
small input pieces, so no single step can produce more than a few MiB however hostile the data
(a 16 KB zstd frame can decode to 512 MB). Two caps hold throughout:

- a line longer than `max_line` bytes is never kept: its bytes are hashed as they stream past and
  the line is replaced by an empty one (line numbers do not shift); `oversized` says where it was
  (offset, length, digest), so it can be parked as a bounded record;
- past `max_total` decompressed bytes reading stops (`over_limit`); what came before is usable.

A zstd stream that ends inside a frame is a writer still appending (or a cut copy): it is
reported as `truncated_frame`, and its incomplete last line stays pending like any unterminated
line. Undecodable zstd data stops reading at that point (`corrupt`).

Offsets and digests are over the decompressed stream, which is what the registry of ingested
sources records (its prefix hash is blake2b-128 of the consumed bytes).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from projections.errors import INGEST_NOT_A_FILE
from projections.logformat import ZSTD_MAGIC

#: Bytes read from disk per step.
READ_CHUNK = 1 << 20
#: Compressed bytes handed to the decoder per step. zstd's densest block (RLE) turns 4 bytes into
#: 128 KiB, so 512 bytes yield at most 16 MiB: the bound on one step's output.
ZSTD_PIECE = 512


class NotAFile(OSError):
    """A path that is no regular file (a device, FIFO, socket, or a link to one): refused before
    any read, as `/dev/zero` never ends and a FIFO's open waits for a writer forever."""

    code = INGEST_NOT_A_FILE

    def __init__(self, path: Path, mode: int) -> None:
        kind = ("a character device" if stat.S_ISCHR(mode) else "a block device"
                if stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "a directory" if stat.S_ISDIR(mode)
                else "not a regular file")
        super().__init__(errno.EINVAL, f"{INGEST_NOT_A_FILE}: {kind}, not a log file (refused "
                         "before any read)", os.fspath(path))


def open_regular(path: Path) -> Any:
    """`path` opened for binary reading if it is a regular file (after links), else NotAFile.
    The open does not wait (O_NONBLOCK: a FIFO swapped in after the check), and the opened
    file is checked again."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotAFile(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFile(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def stream_hasher() -> Any:
    """The registry's prefix hash (blake2b-128): equal to hashing the bytes in one call."""
    return hashlib.blake2b(digest_size=16)


def span_hasher() -> Any:
    """The digest of a bounded record (blake2b-256)."""
    return hashlib.blake2b(digest_size=32)


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of a source that is not kept: where it is (decompressed offset, length) and
    its blake2b-256 digest, so it can be found and verified in the source."""

    line: int
    offset: int
    length: int
    digest: str


@dataclass(slots=True)
class SourceText:
    """A source file's decompressed text with oversized lines blanked, and what reading saw."""

    text: bytes
    size_on_disk: int
    compressed: bool
    #: line number → the oversized line that was blanked there.
    oversized: dict[int, Span] = field(default_factory=dict)
    #: Decompressed bytes read (including blanked lines).
    total: int = 0
    #: Offset just past the last newline, and the prefix hash of the bytes before it.
    complete_end: int = 0
    complete_digest: str = ""
    #: Prefix hash of every byte read (the unterminated tail included).
    full_digest: str = ""
    #: Prefix hash at the requested checkpoint offset (None if the text is shorter).
    checkpoint_digest: str | None = None
    over_limit: bool = False
    truncated_frame: bool = False
    corrupt: str | None = None

    @property
    def tail(self) -> bytes:
        """The unterminated last line ("" when the text ends with a newline)."""
        return self.text[self.text.rfind(b"\n") + 1:]


class _Splitter:
    """Accumulates decompressed bytes, blanking lines over the cap and hashing the stream."""

    def __init__(self, max_line: int, max_total: int, checkpoint: int | None) -> None:
        self.max_line = max_line
        self.max_total = max_total
        self.checkpoint = checkpoint
        self.out = bytearray()
        self.line_start = 0  # offset in `out` where the current (unterminated) line starts
        self.removed = 0  # bytes of blanked lines, so stream offset = out offset + removed
        self.lines_done = 0  # newlines seen
        self.total = 0
        self.hasher = stream_hasher()
        self.complete = self.hasher.copy()
        self.complete_end = 0
        self.checkpoint_digest: str | None = None
        if checkpoint == 0:
            self.checkpoint_digest = self.hasher.copy().hexdigest()
        self.oversized: dict[int, Span] = {}
        self.skip: Any = None  # span hasher of the oversized line being skipped
        self.skip_offset = 0
        self.skip_length = 0
        self.over_limit = False

    def feed(self, data: bytes) -> bool:
        """Take the next decompressed bytes; False once the total cap is reached."""
        if self.over_limit:
            return False
        room = self.max_total - self.total
        if len(data) > room:
            data = data[:room]
            self.over_limit = True
        self._hash(data)
        self.total += len(data)
        while data:
            data = self._step(data)
        return not self.over_limit

    def _hash(self, data: bytes) -> None:
        """Hash the stream, snapshotting at the checkpoint and after this piece's last newline."""
        cuts: list[tuple[int, str]] = []
        cp = self.checkpoint
        if cp is not None and self.checkpoint_digest is None and self.total + len(data) >= cp:
            cuts.append((cp - self.total, "checkpoint"))
        last_nl = data.rfind(b"\n")
        if last_nl >= 0:
            cuts.append((last_nl + 1, "complete"))
        pos = 0
        for cut, kind in sorted(cuts):
            self.hasher.update(data[pos:cut])
            pos = cut
            if kind == "checkpoint":
                self.checkpoint_digest = self.hasher.copy().hexdigest()
            else:
                self.complete = self.hasher.copy()
                self.complete_end = self.total + cut
        self.hasher.update(data[pos:])

    def _step(self, data: bytes) -> bytes:
        if self.skip is not None:
            nl = data.find(b"\n")
            if nl < 0:
                self.skip.update(data)
                self.skip_length += len(data)
                return b""
            self.skip.update(data[:nl])
            self.skip_length += nl
            self._end_skip()
            return data[nl + 1:]
        current = len(self.out) - self.line_start
        first_nl = data.find(b"\n")
        if first_nl < 0:
            if current + len(data) > self.max_line:
                self._start_skip(data)
                return b""
            self.out += data
            return b""
        if current + first_nl > self.max_line:
            self._start_skip(data[:first_nl])
            self._end_skip()
            return data[first_nl + 1:]
        last_nl = data.rfind(b"\n")
        if last_nl - first_nl > self.max_line:
            # A line in between may be over the cap: keep the lines before the first such line
            # (one step: taking a line at a time re-sliced the rest each time, quadratic in a
            # piece of millions of short lines), then that line goes to the skip above.
            long_at = _first_long_line(data, first_nl + 1, last_nl, self.max_line)
            if long_at >= 0:
                self.out += data[:long_at]
                self.lines_done += data.count(b"\n", 0, long_at)
                self.line_start = len(self.out)
                return data[long_at:]
        self.out += data[:last_nl + 1]
        self.lines_done += data.count(b"\n", 0, last_nl + 1)
        self.line_start = len(self.out)
        return data[last_nl + 1:]

    def _start_skip(self, data: bytes) -> None:
        self.skip = span_hasher()
        self.skip.update(self.out[self.line_start:])
        self.skip.update(data)
        self.skip_offset = self.line_start + self.removed
        self.skip_length = len(self.out) - self.line_start + len(data)
        del self.out[self.line_start:]

    def _end_skip(self) -> None:
        number = self.lines_done + 1
        self.oversized[number] = Span(number, self.skip_offset, self.skip_length,
                                      self.skip.hexdigest())
        self.removed = self.skip_offset + self.skip_length - len(self.out)
        self.out += b"\n"
        self.lines_done += 1
        self.line_start = len(self.out)
        self.skip = None

    def finish(self) -> None:
        """At the end of input: a line still being skipped is an oversized unterminated tail."""
        if self.skip is not None:
            number = self.lines_done + 1
            self.oversized[number] = Span(number, self.skip_offset, self.skip_length,
                                          self.skip.hexdigest())
            self.skip = None


def _first_long_line(data: bytes, start: int, end: int, max_line: int) -> int:
    """Where the first line of `data[start:end + 1]` (lines ending in newlines, the last at
    `end`) longer than `max_line` starts, or -1. Linear: such a line holds a whole aligned block
    of `max_line // 2` bytes without a newline, so only blocks without one are looked into."""
    block = max(1, max_line // 2)
    at = start // block * block
    while at < end:
        low, high = max(at, start), min(at + block, end)
        if data.find(b"\n", low, high) >= 0:
            at += block
            continue
        line_start = data.rfind(b"\n", start, low) + 1 if low > start else start
        line_start = max(line_start, start)
        line_end = data.find(b"\n", low, end + 1)
        if line_end - line_start > max_line:
            return line_start
        at = max(at + block, line_end // block * block)
    return -1


def read_source(path: Path, *, max_line: int, max_total: int,
                checkpoint: int | None = None) -> SourceText:
    """Read `path` (raw or concatenated zstd frames) under the caps. `checkpoint` asks for the
    prefix hash at that decompressed offset (the end of what an earlier ingest consumed)."""
    splitter = _Splitter(max_line, max_total, checkpoint)
    size = 0
    compressed = False
    truncated = False
    corrupt: str | None = None
    with open_regular(path) as handle:
        head = handle.read(READ_CHUNK)
        size += len(head)
        compressed = head.startswith(ZSTD_MAGIC)
        if not compressed:
            chunk = head
            while chunk and splitter.feed(chunk):
                chunk = handle.read(READ_CHUNK)
                size += len(chunk)
        else:
            truncated, corrupt, read = _inflate(handle, head, splitter)
            size = read
    splitter.finish()
    out = bytes(splitter.out)
    # After a stop (cap or corrupt data), bytes after the last newline are not a line's end.
    return SourceText(
        text=out, size_on_disk=max(size, path.stat().st_size), compressed=compressed,
        oversized=splitter.oversized, total=splitter.total,
        complete_end=splitter.complete_end, complete_digest=splitter.complete.hexdigest(),
        full_digest=splitter.hasher.hexdigest(), checkpoint_digest=splitter.checkpoint_digest,
        over_limit=splitter.over_limit, truncated_frame=truncated, corrupt=corrupt)


def _inflate(handle: Any, head: bytes, splitter: _Splitter) -> tuple[bool, str | None, int]:
    """Decode concatenated frames in small pieces; (ended mid-frame, error, bytes read)."""
    decoder = zstandard.ZstdDecompressor()
    frame = decoder.decompressobj()
    started = False  # the current frame has consumed input
    buf, pos, read = head, 0, len(head)
    while True:
        if pos >= len(buf):
            buf, pos = handle.read(READ_CHUNK), 0
            read += len(buf)
            if not buf:
                return started, None, read
        piece = buf[pos:pos + ZSTD_PIECE]
        pos += len(piece)
        try:
            produced = frame.decompress(piece)
        except zstandard.ZstdError as exc:
            return False, f"undecodable zstd data: {exc}", read
        started = True
        if produced and not splitter.feed(produced):
            return False, None, read
        if frame.eof:
            leftover = frame.unused_data
            frame = decoder.decompressobj()
            started = False
            if leftover:
                buf, pos = leftover + buf[pos:], 0
