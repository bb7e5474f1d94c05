"""Embedded runtime, stage 0: the append-only local store of session logs and the dead letters.

One native JSONL file per session; its name is a digest of the session id, never the id itself,
so hostile ids cannot become paths. Everything is created owner-only. Appends are fsynced before
the index sees them, so the store is always the authority the index can be rebuilt from.

Only the holder of the writer lock (streams/core/lock.py) appends, repairs a torn tail or trusts its
cache; readers skip an unterminated last line and never write. A line that is not what the
store wrote (damage, a hand edit) is a StoreCorrupt error naming the file and line.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections.codec import JSONDecodeError, dumps, loads
from projections.errors import (
    INGEST_DUPLICATE_CONFLICT,
    INGEST_HEADER_CONFLICT,
    INGEST_SEQ_GAP,
    FoldError,
    InputRejected,
    StoreCorrupt,
)
from projections.events import header_key_fields
from projections.fold import SurfaceState, apply
from projections.logformat import Rejection

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    mode = path.stat().st_mode & 0o777
    if mode & ~DIR_MODE:  # only ever narrowed: an owner's read-only dir stays read-only
        os.chmod(path, mode & DIR_MODE)
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
    #: Digest of each event's line, for telling exact duplicates from conflicts; None when
    #: events were appended since they were computed (recomputed from the file on demand: only
    #: a re-read of already stored events needs them, so appends do not pay for them).
    digests: list[bytes] | None


def _intact(data: bytes) -> bytes:
    """Up to the last newline: what follows it is a write a crash tore (or one in progress)."""
    return data if not data or data.endswith(b"\n") else data[:data.rfind(b"\n") + 1]


class SessionStore:
    """The local archive: one append-only native log per session under `<data_dir>/store`."""

    def __init__(self, root: Path) -> None:
        self.root = ensure_private_dir(root)
        self._cache: OrderedDict[str, StoredSession] = OrderedDict()
        #: Files appended with `durable=False` and not known durable yet, each with the ticket
        #: of its latest append (an fsync that began before that append does not cover it).
        self._unsynced: dict[Path, int] = {}
        self._tickets = itertools.count(1)
        #: Early fsyncs in flight (started at the append, on the shared fsync threads).
        self._early: set[Future[None]] = set()
        #: The first error of an early fsync, raised by the next `sync()`: a failed fsync may
        #: have dropped the file's dirty pages, so a later fsync that succeeds proves nothing.
        self._failed: OSError | None = None
        self._sync_lock = threading.Lock()

    def sync(self) -> None:
        """Make every file appended with `durable=False` before this call durable. Thread-safe:
        the index writer thread calls it before committing what those appends indexed, the
        ingest before it records the sources as consumed. Each such append started an fsync of
        its file already (`_early_sync`): this waits for those, then fsyncs what they did not
        cover (a file appended to again meanwhile), in parallel. Concurrent fsyncs of several
        files share the filesystem's journal commits, where one after the other each pays a
        commit of its own."""
        with self._sync_lock:
            early = list(self._early)
        wait(early)
        with self._sync_lock:
            failed, self._failed = self._failed, None
            left = list(self._unsynced.items())
        if failed is not None:
            raise failed
        if len(left) == 1:
            self._fsync(*left[0])
        elif left:
            for done in _fsync_pool().map(lambda item: self._fsync(*item), left):
                assert done is None

    def _fsync(self, path: Path, ticket: int) -> None:
        """Fsync `path`; it is durable up to the append of `ticket` (and any before)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # deleted meanwhile: nothing left to make durable
            fd = None
        if fd is not None:
            try:
                os.fsync(fd)  # flushes the file, whichever descriptor wrote it
            finally:
                os.close(fd)
        with self._sync_lock:
            if self._unsynced.get(path) == ticket:
                del self._unsynced[path]

    def _early_sync(self, path: Path, ticket: int) -> None:
        try:
            self._fsync(path, ticket)
        except OSError as exc:
            with self._sync_lock:
                self._failed = self._failed or exc

    def path_of(self, session_id: str) -> Path:
        return self.root / session_file_name(session_id)

    def invalidate(self) -> None:
        """Forget cached states: another process may have appended since they were read."""
        self._cache.clear()

    def session_ids(self) -> list[str]:
        ids = []
        for path in sorted(self.root.glob("*.jsonl")):
            with path.open("rb") as f:
                first = f.readline()
            if first.endswith(b"\n"):  # else a header write torn by a crash: not stored yet
                header = self._parse(path, 1, first.rstrip(b"\n"))
                if not isinstance(header, dict) or not isinstance(header.get("id"), str):
                    raise self._corrupt(path, 1, "the first line is not a session header")
                ids.append(header["id"])
        return sorted(ids)

    def _repair(self, path: Path) -> None:
        """Cut a torn last line off (writer only): nothing may be appended after it."""
        with path.open("r+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end == 0:
                return
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            cut = len(_intact(f.read()))
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())

    def _lines(self, path: Path) -> list[bytes]:
        return [line for line in _intact(path.read_bytes()).split(b"\n") if line]

    @staticmethod
    def _corrupt(path: Path, number: int, what: str) -> StoreCorrupt:
        return StoreCorrupt(f"store file {path.name} line {number}: {what}",
                            hint=f"the store should only hold lines it wrote; move {path} aside "
                            "and ingest the session's source again (or restore the file)")

    def _parse(self, path: Path, number: int, line: bytes) -> Any:
        try:
            return loads(line)
        except JSONDecodeError as exc:
            raise self._corrupt(path, number, f"not JSON ({exc})") from None

    def read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Header and events of a stored session (the store holds only validated lines)."""
        path = self.path_of(session_id)
        lines = self._lines(path)
        if not lines:
            raise FileNotFoundError(f"session {session_id!r} has no complete header")
        parsed = [self._parse(path, n, line) for n, line in enumerate(lines, start=1)]
        header = parsed[0]
        if not isinstance(header, dict) or header.get("id") != session_id:
            raise self._corrupt(path, 1, "the header does not name this session")
        for n, event in enumerate(parsed[1:], start=2):
            if not isinstance(event, dict) or event.get("seq") != n - 2:
                raise self._corrupt(path, n, f"expected the event with seq {n - 2}")
        return header, parsed[1:]

    def load(self, session_id: str) -> StoredSession | None:
        """The session's header, fold state and line digests (writer only: repairs a torn tail)."""
        cached = self._cache.get(session_id)
        if cached is not None:
            self._cache.move_to_end(session_id)
            return cached
        path = self.path_of(session_id)
        if not path.exists():
            return None
        self._repair(path)
        if not self._lines(path):
            return None  # only a torn header: append writes it again
        header, events = self.read(session_id)
        state = SurfaceState()
        for n, event in enumerate(events, start=2):
            try:
                state = apply(state, event)
            except FoldError as exc:
                raise self._corrupt(path, n, f"the event does not fold ({exc.message})") from None
        stored = StoredSession(header, state, [_digest(dumps(e)) for e in events])
        self._remember(session_id, stored)
        return stored

    def check_header(self, header: Mapping[str, Any]) -> StoredSession | None:
        """The stored session for this header; InputRejected if the two observations disagree."""
        stored = self.load(str(header["id"]))
        if stored is not None and header_key_fields(stored.header) != header_key_fields(header):
            raise InputRejected(f"header of session {header['id']!r} disagrees with the stored one",
                                code=INGEST_HEADER_CONFLICT)
        return stored

    def classify(self, stored: StoredSession | None, event: Mapping[str, Any],
                 raw: bytes | None = None) -> str:
        """'new', 'duplicate' (same seq, same bytes) or raise for conflicts and gaps. `raw`: the
        event's orjson serialization, if the caller has it."""
        next_seq = stored.state.next_seq if stored else 0
        seq = int(event["seq"])
        if seq == next_seq:
            return "new"
        if stored is not None and seq < next_seq:
            if stored.digests is None:
                stored.digests = [_digest(dumps(e))
                                  for e in self.read(str(stored.header["id"]))[1]]
            if stored.digests[seq] == _digest(raw if raw is not None
                                              else dumps(dict(event))):
                return "duplicate"
            raise InputRejected(f"seq {seq} already holds a different event",
                                code=INGEST_DUPLICATE_CONFLICT)
        raise InputRejected(f"seq {seq} is not contiguous; expected {next_seq}", code=INGEST_SEQ_GAP)

    def append(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]],
               state: SurfaceState, raws: Sequence[bytes | None] | None = None, *,
               durable: bool = True) -> None:
        """Append validated events (creating the file with its header), fsync, update the cache.
        `raws`: the events' orjson serializations where the caller has them (None: dump).
        `durable=False` leaves the fsync to the next `sync()` (one per batch of files, not one
        per file); until then, a crash of the process loses nothing (the bytes are in the OS),
        a crash of the machine may lose the tail, so nothing that claims these events may be
        made durable before `sync()`."""
        session_id = str(header["id"])
        stored = self.load(session_id)
        lines = [] if stored is not None else [dumps(dict(header))]
        if raws is None:
            raws = [None] * len(events)
        raw = [r if r is not None else dumps(dict(e))
               for e, r in zip(events, raws, strict=True)]
        lines.extend(raw)
        if not lines:
            return
        path = self.path_of(session_id)
        with open_private(path, "ab") as f:
            f.write(b"\n".join(lines) + b"\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())
            else:
                with self._sync_lock:
                    ticket = self._unsynced[path] = next(self._tickets)
                    future = _fsync_pool().submit(self._early_sync, path, ticket)
                    self._early.add(future)
                future.add_done_callback(self._early_done)
        if stored is None:
            stored = StoredSession(dict(header), SurfaceState(), [])
            self._remember(session_id, stored)
        stored.state = state
        stored.digests = None

    def _early_done(self, future: Future[None]) -> None:
        with self._sync_lock:
            self._early.discard(future)

    def _remember(self, session_id: str, stored: StoredSession) -> None:
        """Cache a session's state, keeping the CACHED_SESSIONS used last: a bulk ingest of
        many sessions must not hold every one's fold state (a miss rereads the file)."""
        self._cache[session_id] = stored
        self._cache.move_to_end(session_id)
        while len(self._cache) > CACHED_SESSIONS:
            self._cache.popitem(last=False)

    def delete(self, session_id: str) -> None:
        path = self.path_of(session_id)
        with self._sync_lock:
            self._unsynced.pop(path, None)
        path.unlink(missing_ok=True)
        self._cache.pop(session_id, None)


#: Sessions whose state the store keeps cached at most (the most recently used).
CACHED_SESSIONS = 4096
#: Threads that fsync appended files (see `SessionStore.sync`): enough to share journal commits.
FSYNC_THREADS = 16
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _fsync_pool() -> ThreadPoolExecutor:
    """The process's fsync threads (a forked child, which has none of its parent's threads,
    starts its own)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(FSYNC_THREADS,
                                                     thread_name_prefix="recall-fsync"))
        return _pool[1]


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def dead_letter_key(source: str, rejection: Rejection) -> str:
    """Identity of a parked record: where it came from and what it was (not why, not when), so
    parking the same input again, e.g. when a run killed midway is repeated, adds nothing."""
    content = rejection.digest or hashlib.blake2b(rejection.raw, digest_size=32).hexdigest()
    where = f"{rejection.line}:{rejection.offset if rejection.offset is not None else ''}"
    return hashlib.blake2b(f"{source}\0{where}\0{content}".encode("utf-8", "backslashreplace"),
                           digest_size=16).hexdigest()


#: The most bytes a dead letter keeps of a rejected line; a longer line is parked as a bounded
#: record (source, offset, length, digest) and its bytes stay in the source. A small file of
#: many long malformed lines (a 20 KB zstd of 300 lines of 1 MiB) would otherwise copy them all
#: into the dead letters, and every listing would read them back.
KEPT_BYTES = 64 * 1024


class DeadLetters:
    """Rejected input with its original bytes, source position and reason: parked, never lost.

    Records are keyed (`dead_letter_key`), so parking is idempotent: re-running an ingest that a
    crash interrupted parks nothing twice. A whole file's bytes (line 0) are kept up to
    `max_record_bytes`, a line's up to `KEPT_BYTES`; beyond that the record is bounded (offset,
    length, blake2b-256 digest) and the bytes stay in the source. Listing reads the file a
    record at a time."""

    def __init__(self, path: Path, *, max_record_bytes: int = 4 * 1024 * 1024) -> None:
        ensure_private_dir(path.parent)
        self.path = path
        self.max_record_bytes = max_record_bytes
        self._keys: set[str] | None = None

    def invalidate(self) -> None:
        """Forget the known keys: another process may have parked records meanwhile."""
        self._keys = None

    def _known(self) -> set[str]:
        if self._keys is None:
            keys: set[str] = set()
            for entry in self._entries(repair=True):
                key = entry.get("key")
                if isinstance(key, str):
                    keys.add(key)
            self._keys = keys
        return self._keys

    def park(self, source: str, rejections: Sequence[Rejection], session_id: str | None) -> int:
        """Append the records not parked before (writer only); returns how many were new."""
        if not rejections:
            return 0
        known = self._known()
        now = int(time.time() * 1000)
        out: list[bytes] = []
        for r in rejections:
            r = self._bounded(r)
            key = dead_letter_key(source, r)
            if key in known:
                continue
            known.add(key)
            record: dict[str, Any] = {
                "key": key, "source": source, "line": r.line, "sessionId": session_id,
                "code": r.code, "reason": r.reason, "at": now, "length": r.size,
                "bytes": None if r.bounded else base64.b64encode(r.raw).decode("ascii")}
            if r.offset is not None:
                record["offset"] = r.offset
            if r.bounded:
                record["digest"] = r.digest
            out.append(dumps(record))
        if out:
            with open_private(self.path, "ab") as f:
                f.write(b"\n".join(out) + b"\n")
                f.flush()
                os.fsync(f.fileno())
        return len(out)

    def _bounded(self, r: Rejection) -> Rejection:
        cap = self.max_record_bytes if r.line == 0 else min(KEPT_BYTES, self.max_record_bytes)
        if r.bounded or len(r.raw) <= cap:
            return r
        return Rejection(r.line, r.code, f"{r.reason} (record of {len(r.raw)} bytes kept as a "
                         "bounded record: offset, length and digest)", b"",
                         digest=hashlib.blake2b(r.raw, digest_size=32).hexdigest(),
                         length=len(r.raw), offset=r.offset)

    def _entries(self, *, repair: bool) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        if repair:
            _drop_torn_tail(self.path)  # a record torn by a crash; the re-run re-parks it
        with self.path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                torn = not line.endswith(b"\n")
                line = line.rstrip(b"\n")
                if line:
                    yield self._entry(number, line, torn)

    def _entry(self, number: int, line: bytes, torn: bool) -> dict[str, Any]:
        try:
            entry = loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except (JSONDecodeError, ValueError) as exc:
            return {"source": str(self.path), "line": number, "sessionId": None,
                    "code": StoreCorrupt.code,
                    "reason": ("a record torn by a crash (re-run the ingest to park it again)"
                               if torn else f"this dead-letter line cannot be read: {exc}"),
                    "length": len(line), "bytes": base64.b64encode(line).decode("ascii")}
        if "key" not in entry and isinstance(entry.get("bytes"), str):
            entry["key"] = _legacy_key(entry)
        return entry

    def read(self) -> list[dict[str, Any]]:
        """Every record; a line that cannot be read is shown as a RECALL_STORE_CORRUPT record
        holding its bytes, so one damaged line never hides the others."""
        return list(self._entries(repair=False))


def _drop_torn_tail(path: Path) -> None:
    """Cut what follows the file's last newline (reading back from the end, not the file)."""
    with path.open("r+b") as f:
        end = f.seek(0, os.SEEK_END)
        at = end
        while at > 0:
            step = min(at, 1 << 16)
            f.seek(at - step)
            chunk = f.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                at = at - step + newline + 1
                break
            at -= step
        if at != end:
            f.truncate(at)
            f.flush()
            os.fsync(f.fileno())


def _legacy_key(entry: Mapping[str, Any]) -> str | None:
    """The key of a record written before records carried one."""
    try:
        raw = base64.b64decode(entry["bytes"])
        return dead_letter_key(str(entry["source"]), Rejection(int(entry["line"]), "", "", raw))
    except (ValueError, TypeError, KeyError):
        return None
