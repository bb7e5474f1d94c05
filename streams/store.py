"""Embedded runtime, stage 0: the append-only local store of session logs and the dead letters.

One native JSONL file per session; its name is a digest of the session id, never the id itself,
so hostile ids cannot become paths. Everything is created owner-only. Appends are fsynced before
the index sees them, so the store is always the authority the index can be rebuilt from.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_HEADER_CONFLICT,
    INGEST_SEQ_GAP,
    InputRejected,
)
from projections.events import header_key_fields
from projections.fold import SurfaceState, apply
from projections.logformat import Rejection

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, mode: str) -> Any:
    """Open for writing, creating the file 0600 (umask cannot widen it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC),
                 FILE_MODE)
    return os.fdopen(fd, mode)


def session_file_name(session_id: str) -> str:
    return hashlib.blake2b(session_id.encode("utf-8"), digest_size=16).hexdigest() + ".jsonl"


@dataclass(slots=True)
class StoredSession:
    """What the store knows of one session without rereading it: header, fold state, line bytes."""

    header: dict[str, Any]
    state: SurfaceState
    digests: list[bytes]


class SessionStore:
    """The local archive: one append-only native log per session under `<data_dir>/store`."""

    def __init__(self, root: Path) -> None:
        self.root = ensure_private_dir(root)
        self._cache: dict[str, StoredSession] = {}

    def path_of(self, session_id: str) -> Path:
        return self.root / session_file_name(session_id)

    def session_ids(self) -> list[str]:
        ids = []
        for path in sorted(self.root.glob("*.jsonl")):
            with path.open("rb") as f:
                first = f.readline()
            if first.endswith(b"\n"):  # else a header write torn by a crash: not stored yet
                ids.append(str(orjson.loads(first)["id"]))
        return sorted(ids)

    def _intact_lines(self, path: Path) -> list[bytes]:
        """The complete lines of a log. A crash mid-append can leave a torn last line (or an
        empty file); what follows the last newline never completed, so it is cut off here,
        before anything is appended after it."""
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with path.open("r+b") as f:
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())
            data = data[:cut]
        return [line for line in data.splitlines() if line]

    def read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Header and events of a stored session (the store holds only validated lines)."""
        lines = self._intact_lines(self.path_of(session_id))
        if not lines:
            raise FileNotFoundError(f"session {session_id!r} has no complete header")
        return orjson.loads(lines[0]), [orjson.loads(line) for line in lines[1:]]

    def iter_raw(self, session_id: str) -> Iterator[bytes]:
        with self.path_of(session_id).open("rb") as f:
            for line in f:
                yield line.rstrip(b"\n")

    def load(self, session_id: str) -> StoredSession | None:
        cached = self._cache.get(session_id)
        if cached is not None:
            return cached
        path = self.path_of(session_id)
        if not path.exists() or not self._intact_lines(path):
            return None  # never stored, or only a torn header: append writes it again
        header, events = self.read(session_id)
        state = SurfaceState()
        digests = []
        for event in events:
            state = apply(state, event)
            digests.append(_digest(orjson.dumps(event)))
        stored = StoredSession(header, state, digests)
        self._cache[session_id] = stored
        return stored

    def check_header(self, header: Mapping[str, Any]) -> StoredSession | None:
        """The stored session for this header; InputRejected if the two observations disagree."""
        stored = self.load(str(header["id"]))
        if stored is not None and header_key_fields(stored.header) != header_key_fields(header):
            raise InputRejected(f"header of session {header['id']!r} disagrees with the stored one",
                                code=INGEST_HEADER_CONFLICT)
        return stored

    def classify(self, stored: StoredSession | None, event: Mapping[str, Any]) -> str:
        """'new', 'duplicate' (same seq, same bytes) or raise for conflicts and gaps."""
        next_seq = stored.state.next_seq if stored else 0
        seq = int(event["seq"])
        if seq == next_seq:
            return "new"
        if stored is not None and seq < next_seq:
            if stored.digests[seq] == _digest(orjson.dumps(dict(event))):
                return "duplicate"
            raise InputRejected(f"seq {seq} already holds a different event",
                                code=INGEST_DUPLICATE_CONFLICT)
        raise InputRejected(f"seq {seq} is not contiguous; expected {next_seq}", code=INGEST_SEQ_GAP)

    def append(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
               state: SurfaceState) -> None:
        """Append validated events (creating the file with its header), fsync, update the cache."""
        session_id = str(header["id"])
        stored = self.load(session_id)
        lines = [] if stored is not None else [orjson.dumps(dict(header))]
        raw = [orjson.dumps(dict(e)) for e in events]
        lines.extend(raw)
        if not lines:
            return
        with open_private(self.path_of(session_id), "ab") as f:
            f.write(b"\n".join(lines) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        if stored is None:
            stored = StoredSession(dict(header), SurfaceState(), [])
            self._cache[session_id] = stored
        stored.state = state
        stored.digests.extend(_digest(r) for r in raw)

    def delete(self, session_id: str) -> None:
        self.path_of(session_id).unlink(missing_ok=True)
        self._cache.pop(session_id, None)


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


class DeadLetters:
    """Rejected input with its original bytes, source position and reason: parked, never lost."""

    def __init__(self, path: Path) -> None:
        ensure_private_dir(path.parent)
        self.path = path

    def park(self, source: str, rejections: Sequence[Rejection], session_id: str | None) -> None:
        if not rejections:
            return
        now = int(time.time() * 1000)
        with open_private(self.path, "ab") as f:
            for r in rejections:
                f.write(orjson.dumps({
                    "source": source, "line": r.line, "sessionId": session_id, "code": r.code,
                    "reason": r.reason, "at": now,
                    "bytes": base64.b64encode(r.raw).decode("ascii")}) + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines() if line]
