"""Storage and read side: the index writer in a process of its own, for bulk writes.

The writer thread (indexer/pipeline.py) overlaps SQLite with the caller's thread, but half of
its work is Python (records into rows, blocks, naming facts) that needs the one GIL the caller's
thread (reading, validating, folding the next events) holds nearly all the time: the two share
one interpreter, and together they cannot use two cores. A child process has an interpreter of
its own: the writer thread then only pickles each group of records, hands it to the child and
waits for the answer without the GIL, while the child applies it with `ShardSet.write_batch`.
Meanwhile the writer thread already collects the next group, makes its sources durable and
pickles it (indexer/pipeline.py, `Overlapped`), so the child gets it as soon as it answers.

The child is a part of the writer that holds the data dir's lock, never a second writer: it
opens the same shard files and writes only the groups it is handed, one at a time, answering
each before the next comes; the parent writes nothing meanwhile (`ShardSet.write_batch` drains
the pipeline first) and forgets its own writer caches (ids, extents, blocks) before it writes
again. A group the child fails on comes back as the same error (SessionQueryError and
SourceConflict keep their code, message and fields), so the writer thread's retry of a failed
group batch by batch names the right batch as it does in-process.

Protocol over the child's stdin/stdout: frames of an 8-byte little-endian length and a pickle
(parent and child are the same interpreter and code). The child's own prints go to stderr.
The child's side is indexer/writerchild.py (`python -m indexer.writerchild`).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from indexer.config import IndexConfig
from indexer.errors import INDEX_FAILED, SourceConflict, query_error
from projections.errors import SessionQueryError
from projections.fold import Replacement
from projections.records import EventRecord, HeaderRecord, IndexRecord
from projections.surfaces import Surface

_LENGTH = struct.Struct("<Q")


def send_frame(stream: IO[bytes], value: Any) -> None:
    send_bytes(stream, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def send_bytes(stream: IO[bytes], data: bytes) -> None:
    """A frame pickled already."""
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def receive_frame(stream: IO[bytes]) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the index writer process ended")
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the index writer process ended")
    return pickle.loads(data)


_SURFACES = {surface: surface.value for surface in Surface}


def encode_records(records: Sequence[IndexRecord]) -> list[tuple[Any, ...]]:
    """Records as plain tuples: pickled in C alone, where a record's NamedTuple and enum
    reductions would each call Python (on the thread that shares the reader's GIL)."""
    surfaces = _SURFACES
    out: list[tuple[Any, ...]] = []
    for r in records:
        if type(r) is EventRecord:
            rep = r.replacement
            out.append((r.session_id, r.seq, r.type, r.time, surfaces[r.surface], r.text, r.raw,
                        None if rep is None else (rep.seq, rep.start, rep.end,
                                                  rep.shadowed_seqs)))
        else:
            out.append(tuple(r))
    return out


_SURFACE_OF = {surface.value: surface for surface in Surface}


def decode_records(rows: Sequence[tuple[Any, ...]]) -> list[IndexRecord]:
    surface_of = _SURFACE_OF
    new = tuple.__new__  # a NamedTuple without its generated __new__'s Python frame
    out: list[IndexRecord] = []
    for row in rows:
        if len(row) == 2:
            out.append(HeaderRecord(*row))
            continue
        sid, seq, kind, time, surface, text, raw, rep = row
        out.append(new(EventRecord, (sid, seq, kind, time, surface_of[surface], text, raw,
                                     None if rep is None else Replacement(*rep))))
    return out


def error_frame(exc: BaseException) -> tuple[Any, ...]:
    if isinstance(exc, SourceConflict):
        return ("conflict", exc.message, exc.session_id, exc.seq)
    if isinstance(exc, SessionQueryError):
        return ("query", exc.code, exc.message, exc.hint)
    return ("other", f"{type(exc).__name__}: {exc}")


def _error_from(frame: tuple[Any, ...]) -> BaseException:
    if frame[0] == "conflict":
        return SourceConflict(frame[1], session_id=frame[2], seq=frame[3])
    if frame[0] == "query":
        return SessionQueryError(frame[2], code=frame[1], hint=frame[3] or None)
    return query_error(INDEX_FAILED, f"the index writer process failed: {frame[1]}")


class WriterProcess:
    """A child process applying `write(records, positions)` to the shards under `root`."""

    def __init__(self, root: str, config: IndexConfig, key_dir: str | None) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "indexer.writerchild"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": _python_path()})
        self._closed = False
        try:
            self._call(("open", root, config, key_dir))
        except BaseException:
            self._kill()
            raise

    def _call(self, request: tuple[Any, ...]) -> Any:
        self.send(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
        return self.result()

    # A write in steps (indexer/pipeline.py's Overlapped): the writer thread prepares the next
    # group while the child still applies the one sent before it.

    def prepare(self, records: Sequence[IndexRecord], positions: Mapping[str, int]) -> bytes:
        """The write request's frame (records as plain tuples, pickled)."""
        return pickle.dumps(("write", encode_records(records), dict(positions)),
                            protocol=pickle.HIGHEST_PROTOCOL)

    def send(self, request: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            send_bytes(self._proc.stdin, request)
        except OSError as exc:
            raise query_error(INDEX_FAILED, f"the index writer process ended: {exc}") from None

    def result(self) -> Any:
        """The answer to the request sent last (the child answers each before it reads the
        next), or its error raised."""
        assert self._proc.stdout is not None
        try:
            answer = receive_frame(self._proc.stdout)
        except (OSError, EOFError) as exc:
            raise query_error(INDEX_FAILED, f"the index writer process ended: {exc}") from None
        if answer[0] == "ok":
            return answer[1]
        raise _error_from(answer[1])

    def ready(self) -> bool:
        # The child writes one answer per request and nothing after it, so nothing of it can
        # wait in the reader's buffer: the pipe says whether it is in.
        assert self._proc.stdout is not None
        return bool(select.select([self._proc.stdout], [], [], 0)[0])

    def write(self, records: Sequence[IndexRecord], positions: Mapping[str, int]) -> bool:
        self.send(self.prepare(records, positions))
        return bool(self.result())

    def close(self) -> None:
        """Stop the child once it has answered every write (it commits each before it answers)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(("stop",))
        finally:
            self._kill()

    def _kill(self) -> None:
        self._closed = True
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _python_path() -> str:
    """The parent's import path, so the child imports the same code (e.g. a checkout)."""
    return os.pathsep.join(p for p in sys.path if p)
