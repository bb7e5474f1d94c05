"""Storage and read side: raw events kept in compressed blocks of 16 consecutive seqs per session.

A block row is one byte naming the zstd dictionary (0: none) followed by a zstd frame of its
entries: their count, their indexes in the block, their lengths (little-endian u32), then the
raw bytes, in seq order (fixed-width lengths decode faster in Python than varints).
Compressing 16 events together beats one frame per event, also with a trained dictionary.
Each shard trains its own dictionaries from its blocks: a small one early (so a young shard
compresses well), a larger one later (better still once there is more to learn from); blocks keep the dictionary they were written with, so no block is rewritten
(rewriting shrunk blocks in place would leave holes in their pages). A dictionary never
changes once written, so readers cache it by (shard epoch, dictionary id).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from indexer.database import Conn
from indexer.locks import Lock, local
from indexer.schema import BLOCK_EVENTS, SEQ_MASK, block_id
from projections.codec import dumps

if TYPE_CHECKING:
    import zstandard

LEVEL = 3
#: (blocks in the shard, dictionary size): when each dictionary is trained (on the most
#: recent TRAIN_SAMPLE_BLOCKS blocks).
TRAINING = ((64, 32 * 1024), (2048, 110 * 1024))
#: More samples train longer for hardly smaller blocks; training runs on the index writer during
#: ingest, once per shard, so a smaller sample is the better trade (bench/index.py measures it).
TRAIN_SAMPLE_BLOCKS = 512
#: COVER parameters given, not searched for: zstd's default search tries dozens of (k, d) pairs
#: and takes several times as long, while the blocks come out no larger (on the bench corpus and
#: the real Claude Code / Codex excerpts alike). The search itself settles on k=1024, d=8 for
#: the large dictionary.
TRAIN_K, TRAIN_D = 1024, 8
_zstandard: Any = None


def _zstd() -> Any:
    """zstandard's C backend, loaded when a block is first read or written (a listing reads
    none). The package itself imports `platform` (which compiles nine patterns) only to pick
    that backend, a good part of a one-search process's work: on CPython the backend is
    loaded directly (the same module the package exports; the package where that fails or
    PYTHON_ZSTANDARD_IMPORT_POLICY asks for another backend)."""
    global _zstandard
    if _zstandard is None:
        _zstandard = _c_backend()
        if _zstandard is None:
            import zstandard

            _zstandard = zstandard
    return _zstandard


def _c_backend() -> Any:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    name = "zstandard.backend_c"
    if name in sys.modules:
        return sys.modules[name]
    if (sys.implementation.name != "cpython"
            or os.environ.get("PYTHON_ZSTANDARD_IMPORT_POLICY", "default").strip() != "default"):
        return None
    try:
        package = importlib.util.find_spec("zstandard")
        folders = (package.submodule_search_locations or []) if package else []
        for folder in folders:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "backend_c" + suffix)
                if os.path.isfile(path):
                    loader = importlib.machinery.ExtensionFileLoader(name, path)
                    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
                    if spec is None:
                        return None
                    module = importlib.util.module_from_spec(spec)
                    loader.exec_module(module)
                    return module
    except (ImportError, OSError):
        pass
    return None

_dictionaries: dict[tuple[str, int], zstandard.ZstdCompressionDict] = {}
_dictionaries_lock = Lock()
_local = local()


def _encode_entries(entries: Mapping[int, bytes]) -> bytes:
    indexes = sorted(entries)
    raws = [entries[i] for i in indexes]
    return b"".join((bytes((len(indexes), *indexes)),
                     struct.pack(f"<{len(raws)}I", *map(len, raws)), *raws))


def _decode_entries(data: bytes) -> dict[int, bytes]:
    count = data[0]
    lengths = struct.unpack_from(f"<{count}I", data, 1 + count)
    at = 1 + 5 * count
    entries: dict[int, bytes] = {}
    for index, size in zip(data[1:1 + count], lengths, strict=True):
        entries[index] = data[at:at + size]
        at += size
    return entries


def _dictionary(conn: Conn, epoch: str, number: int) -> zstandard.ZstdCompressionDict:
    key = (epoch, number)
    found = _dictionaries.get(key)
    if found is None:
        row = conn.execute("SELECT data FROM dictionaries WHERE id = ?", (number,)).fetchone()
        if row is None:
            raise ValueError(f"block dictionary {number} is missing")
        found = _zstd().ZstdCompressionDict(bytes(row[0]))
        with _dictionaries_lock:
            _dictionaries[key] = found
    return found


def _decompressor(conn: Conn, epoch: str, number: int) -> zstandard.ZstdDecompressor:
    # Decompressor objects are not safe to share between threads: one per thread and dictionary.
    cache: dict[tuple[str, int], zstandard.ZstdDecompressor] | None = getattr(_local, "d", None)
    if cache is None:
        cache = _local.d = {}
    key = (epoch, number)
    found = cache.get(key)
    if found is None:
        dict_data = _dictionary(conn, epoch, number) if number else None
        zstd = _zstd()
        found = cache[key] = zstd.ZstdDecompressor(dict_data=dict_data,
                                                   format=zstd.FORMAT_ZSTD1_MAGICLESS)
    return found


def decode_block(conn: Conn, epoch: str, data: bytes) -> dict[int, bytes]:
    """Index in block → raw bytes."""
    payload = _decompressor(conn, epoch, data[0]).decompress(data[1:])
    return _decode_entries(payload)


class BlockWriter:
    """Compresses blocks for one shard's writer connection (one thread at a time)."""

    def __init__(self, conn: Conn, epoch: str) -> None:
        self.conn = conn
        self.epoch = epoch
        self._compressors: dict[int, zstandard.ZstdCompressor] = {}
        self.reset()

    def reset(self) -> None:
        """Forget what a rolled-back transaction may have written."""
        row = self.conn.execute("SELECT max(id) FROM dictionaries").fetchone()
        self.dictionary = int(row[0] or 0)
        self._blocks: int | None = None  # counted when a training decision needs it

    def _compressor(self, number: int) -> zstandard.ZstdCompressor:
        found = self._compressors.get(number)
        if found is None:
            dict_data = _dictionary(self.conn, self.epoch, number) if number else None
            zstd = _zstd()
            params = zstd.ZstdCompressionParameters.from_level(
                LEVEL, format=zstd.FORMAT_ZSTD1_MAGICLESS, write_checksum=0, write_dict_id=0,
                write_content_size=1)
            found = self._compressors[number] = zstd.ZstdCompressor(
                dict_data=dict_data, compression_params=params)
        return found

    def encode(self, entries: Mapping[int, bytes]) -> bytes:
        number = self.dictionary
        return bytes((number,)) + self._compressor(number).compress(_encode_entries(entries))

    def read(self, block: int) -> dict[int, bytes]:
        row = self.conn.execute("SELECT data FROM blocks WHERE id = ?", (block,)).fetchone()
        return {} if row is None else decode_block(self.conn, self.epoch, bytes(row[0]))

    def write(self, blocks: Mapping[int, Mapping[int, bytes]]) -> None:
        """Store whole blocks (callers merge with what a block already held)."""
        self._maybe_train()
        if not blocks:
            return
        number = self.dictionary
        # One compression call for the run, one statement: each call that drops the GIL costs
        # up to a switch interval to get it back while the ingest's reader thread is busy.
        frames = self._compressor(number).multi_compress_to_buffer(
            [_encode_entries(entries) for entries in blocks.values()], threads=0)
        prefix = bytes((number,)).hex()
        rows = [(block, prefix + frames[i].tobytes().hex()) for i, block in enumerate(blocks)]
        self.conn.execute("INSERT OR REPLACE INTO blocks(id, data)"
                          " SELECT value ->> 0, unhex(value ->> 1) FROM json_each(?)",
                          (dumps(rows),))
        if self._blocks is not None:
            self._blocks += len(blocks)  # replaced blocks count again: only a trigger

    def _maybe_train(self) -> None:
        if self.dictionary >= len(TRAINING):
            return
        if self._blocks is None:
            self._blocks = int(self.conn.execute("SELECT count(*) FROM blocks").fetchone()[0])
        after, size = TRAINING[self.dictionary]
        if self._blocks < after:
            return
        rows = self.conn.execute("SELECT data FROM blocks ORDER BY id DESC LIMIT ?",
                                 (TRAIN_SAMPLE_BLOCKS,)).fetchall()
        samples: list[bytes | bytearray | memoryview] = [
            _decompressor(self.conn, self.epoch, d[0]).decompress(bytes(d)[1:]) for (d,) in rows]
        try:
            trained = _zstd().train_dictionary(size, samples, level=LEVEL, k=TRAIN_K,
                                               d=TRAIN_D)
        except _zstd().ZstdError:
            self._blocks = 0  # too little variety to train on yet: try again later
            return
        number = self.dictionary + 1
        self.conn.execute("INSERT INTO dictionaries(id, data) VALUES (?, ?)",
                          (number, trained.as_bytes()))
        self.dictionary = number


def read_raws(conn: Conn, epoch: str,
              events: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """(session number, seq) → raw bytes, for the given events (absent ones are left out)."""
    wanted: dict[int, list[tuple[int, int]]] = {}
    for key in events:
        wanted.setdefault(block_id(*key), []).append(key)
    if not wanted:
        return {}
    out: dict[tuple[int, int], bytes] = {}
    rows = conn.execute("SELECT id, data FROM blocks WHERE id IN (SELECT value FROM json_each(?))",
                        (dumps(sorted(wanted)),))
    for block, data in rows:
        entries = decode_block(conn, epoch, bytes(data))
        for key in wanted[int(block)]:
            raw = entries.get(key[1] & (BLOCK_EVENTS - 1))
            if raw is not None:
                out[key] = raw
    return out


def iter_session_raws(conn: Conn, epoch: str, session_no: int, first_seq: int = 0,
                      last_seq: int = SEQ_MASK) -> Iterator[tuple[int, bytes]]:
    """(seq, raw bytes) of a session's events with first_seq <= seq <= last_seq, in seq order."""
    first, last = max(first_seq, 0), min(last_seq, SEQ_MASK)
    if last < first:
        return
    rows = conn.execute("SELECT id, data FROM blocks WHERE id BETWEEN ? AND ? ORDER BY id",
                        (block_id(session_no, first), block_id(session_no, last))).fetchall()
    base_block = block_id(session_no, 0)
    for block, data in rows:
        base = (int(block) - base_block) * BLOCK_EVENTS
        for index, raw in sorted(decode_block(conn, epoch, bytes(data)).items()):
            if first <= base + index <= last:
                yield base + index, raw
