"""Storage and read side: semantic and hybrid searches over the shards' int4 vectors.

Semantic: a cosine scan of the vectors of every shard (cached in memory per shard file, taken up
incrementally by rowid), each event scored by its vector; the best events are then joined to
their rows under the request's filters — exactly the filters a lexical search applies — growing
the scan's cut until the page is full or every vector was looked at.

A large index is scanned in two steps: the Hamming distance of every vector's sign bits to the
query's (DIMENSION / 8 bytes a vector, so a million vectors are a fast pass) picks a shortlist, and only the
shortlisted vectors are scored exactly. The shortlist is every vector at or under one distance
threshold over all shards together (the smallest that takes in enough vectors, ties all in), so
which vectors it holds depends on neither the shard count nor the order of the rows. Indexes of
up to SHORTLIST vectors (and searches whose cut needs more) are scored exactly, vector by
vector.

Hybrid: reciprocal rank fusion of the lexical ranking (PROTOCOL §3.6, unchanged) and the dense
one, per event; across sessions each session is represented by its best fused event, like a
lexical search. Ties (equal fused scores) fall back to the lexical rule's keys, then session id
and seq, so the same index and query give the same order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from indexer.database import Conn
from indexer.errors import INVALID_QUERY, query_error
from indexer.locks import Lock
from indexer.ranking import Candidate, Scope, event_key
from indexer.search import _COLUMNS, _JOINS, _candidate, _where
from indexer.semantic import DIMENSION, load_embedder, quantize, unpack4
from indexer.vectorsetting import MODEL_ID, OFF
from projections.codec import dumps

if TYPE_CHECKING:  # (loaded with the pool, by a search by meaning only)
    from concurrent.futures import Future, ThreadPoolExecutor

#: Our code (PROTOCOL's SESSION_QUERY_* set is closed): the index holds no vectors.
SEMANTIC_UNAVAILABLE = "RECALL_SEMANTIC_UNAVAILABLE"
#: Reciprocal rank fusion's constant (Cormack et al.; cass and most peers use 60).
RRF_K = 60
#: Events each ranking contributes to a fusion, at least (more when the page needs more).
FUSE_DEPTH = 100
#: Events scored per shard before the filters' join, at least; ×GROW while the page is short.
DENSE_MIN = 128
GROW = 8
#: Vectors scored exactly, at least, once an index holds more (the sign-bit shortlist's size);
#: OVERSAMPLE × the vectors the cut needs when that is more.
SHORTLIST = 4096
OVERSAMPLE = 8
#: 64-bit words of one vector's sign bits.
WORDS = DIMENSION // 64
#: Threads a search by meaning keeps busy, the caller's included: the shards' sign-bit passes
#: and first scoring are shared out (numpy releases the GIL).
LANES = max(1, min(2, os.cpu_count() or 1))


def not_scattered() -> Exception:
    """A search by meaning across shards with different owners, asked of a coordinator that
    cannot ask the owners the questions of its rounds (indexer/scatter.py)."""
    return query_error(SEMANTIC_UNAVAILABLE,
                       "a semantic or hybrid search across sessions needs the shard owners'"
                       " vector rounds, which this coordinator cannot ask",
                       hint="search with mode lexical, or one session's events by meaning")


def unavailable() -> Exception:
    return query_error(SEMANTIC_UNAVAILABLE,
                       "this index holds no semantic vectors (it was built without them)",
                       hint="set RECALL_SEMANTIC=1 (with the 'semantic' extra installed) and run"
                            " `recall reindex`; lexical search works as before")


def check_vectors(stored: str) -> None:
    """Raise unless a shard recording `stored` (its meta `semantic`) holds vectors this version
    can score: none (OFF), or another model's (other dimensions, other meaning: their bytes
    would be read as garbage), is RECALL_SEMANTIC_UNAVAILABLE."""
    if stored == OFF:
        raise unavailable()
    if stored.removesuffix("/tools") != MODEL_ID:
        raise query_error(SEMANTIC_UNAVAILABLE,
                          f"this index's vectors were made by another model ({stored}); this"
                          f" version embeds with {MODEL_ID}",
                          hint="run `recall reindex` with RECALL_SEMANTIC=1 to rebuild them;"
                               " lexical search works as before")


class _ShardVectors:
    """One shard file's vectors in memory: event ids, rows (int4 values held as int8) and their
    inverse norms."""

    def __init__(self, np: Any) -> None:
        self.np = np
        self.last = 0
        self.events = np.zeros(0, np.int64)
        self.rows = np.zeros((0, DIMENSION), np.int8)
        self.inverse = np.zeros(0, np.float64)
        #: the rows' sign bits, word by word (WORDS contiguous columns: each pass of the Hamming
        #: scan reads one)
        self.bits = np.zeros((WORDS, 0), np.uint64)
        self.lock = Lock()

    def refresh(self, conn: Conn) -> None:
        np = self.np
        fresh = conn.execute("SELECT id, event, v FROM vectors WHERE id > ? ORDER BY id",
                             (self.last,)).fetchall()
        if not fresh:
            return
        rows = unpack4(np, b"".join(bytes(r[2]) for r in fresh))
        norms = np.sqrt(np.square(rows.astype(np.int64)).sum(axis=1).astype(np.float64))
        self.events = np.concatenate([self.events, np.asarray([int(r[1]) for r in fresh],
                                                                np.int64)])
        self.rows = np.concatenate([self.rows, rows])
        self.inverse = np.concatenate([self.inverse, 1.0 / np.maximum(norms, 1e-12)])
        self.bits = np.concatenate([self.bits, sign_words(np, rows)], axis=1)
        self.last = int(fresh[-1][0])

    def hamming(self, query_words: Any) -> Any:
        """The Hamming distance (0..DIMENSION) of every row's sign bits to the query's."""
        np = self.np
        bits = self.bits
        count = bits.shape[1]
        out = np.zeros(count, np.uint16)
        word = np.empty(count, np.uint64)
        ones = np.empty(count, np.uint8)
        for at in range(WORDS):
            np.bitwise_xor(bits[at], query_words[at], out=word)
            np.bitwise_count(word, out=ones)
            out += ones
        return out

    def scores_of(self, picked: Any, query: Any) -> tuple[Any, Any]:
        """(event id, score) of the rows `picked` (indexes), exactly as `scores` has them."""
        np = self.np
        dots = np.einsum("ij,j->i", self.rows[picked], query, dtype=np.float32,
                         casting="unsafe")
        return self.events[picked], dots.astype(np.float64) * self.inverse[picked]

    def scores(self, query: Any) -> tuple[Any, Any]:
        """(event id, score) of every row (one per event), in row order.

        `query` is an int8 vector as float32: every product and partial sum of the scan is an
        integer far below 2**24, exact in float32 whatever order BLAS adds them in, so a vector's
        score never depends on where it sits in the matrix (nor on the shard count)."""
        np = self.np
        events, rows, inverse = self.events, self.rows, self.inverse  # (refresh replaces them)
        # einsum, not BLAS: one thread, no full float32 copy of the rows (a multi-threaded gemv
        # waits on its threads whenever the machine is busy)
        dots = np.einsum("ij,j->i", rows, query, dtype=np.float32, casting="unsafe")
        return events, dots.astype(np.float64) * inverse


def top_events(np: Any, events: Any, scores: Any, cut: int) -> tuple[Any, Any, bool]:
    """At least `cut` events (all if fewer) with their scores, best first (ties: smaller event
    id), and whether that is every event. (An event has one vector: a row is an event.)

    Only the rows scoring at least the `cut`-th best row's score are sorted: every row tied
    with it is in, so which rows are sorted never depends on how a partial sort broke ties."""
    complete = cut >= len(scores)
    if complete:
        picked = np.arange(len(scores))
    else:
        threshold = np.partition(scores, len(scores) - cut)[len(scores) - cut]
        picked = np.flatnonzero(scores >= threshold)
    order = picked[np.lexsort((events[picked], -scores[picked]))]
    return events[order], scores[order], complete


def sign_words(np: Any, rows: Any) -> Any:
    """The sign bits (component > 0) of int8 rows as WORDS uint64 columns."""
    packed = np.packbits(rows > 0, axis=1)  # (n, DIMENSION // 8) bytes
    return np.ascontiguousarray(packed.view(np.uint64).T)


class VectorCache:
    """The vectors of every shard a query service reads, keyed by shard file and epoch."""

    def __init__(self) -> None:
        self._shards: dict[tuple[str, str], _ShardVectors] = {}
        self._lock = Lock()

    def shard(self, key: tuple[str, str], conn: Conn) -> _ShardVectors:
        """The vectors of the shard `key` names, brought up to what `conn` sees."""
        np = _numpy()
        with self._lock:
            found = self._shards.get(key)
            if found is None:
                found = self._shards[key] = _ShardVectors(np)
        with found.lock:
            found.refresh(conn)
        return found

    def scores(self, key: tuple[str, str], conn: Conn, query: Any) -> tuple[Any, Any]:
        """(event id, score) of every vector of the shard `key` names, as `conn` sees it."""
        return self.shard(key, conn).scores(query)


def _numpy() -> Any:
    import numpy

    return numpy


def shortlist_limit(np: Any, total: int, histogram: Any, cut: int) -> int | None:
    """The Hamming distance up to which vectors are scored for a cut of `cut` events, from
    the count of vectors at each distance over all shards (`histogram`, DIMENSION + 1 counts)
    and their number; None: every vector is scored (a small index, or a cut that needs
    about all of them)."""
    wanted = max(SHORTLIST, cut * OVERSAMPLE)
    if total <= SHORTLIST or wanted >= total:
        return None
    # the smallest distance within which lie at least `wanted` vectors of all shards
    return int(np.searchsorted(np.cumsum(histogram), wanted))


def distance_histogram(np: Any, distances: Any) -> Any:
    """The count of one shard's vectors at each Hamming distance (0..DIMENSION)."""
    return np.bincount(distances, minlength=DIMENSION + 1)


def query_words(np: Any, query: Any) -> Any:
    """The query's sign bits, word by word (as `sign_words` has a row's)."""
    return sign_words(np, query.reshape(1, -1))[:, 0]


def shard_tops(np: Any, vectors: _ShardVectors, query: Any, limit: int | None, cut: int,
               distances: Any = None) -> tuple[Any, Any, bool]:
    """One shard's `top_events` for a cut of `cut`, scoring the vectors within Hamming
    distance `limit` of the query (all with None); `distances`: the shard's, if known."""
    if limit is None:
        events, scores = vectors.scores(query)
    else:
        if distances is None:
            distances = vectors.hamming(query_words(np, query))
        events, scores = vectors.scores_of(np.flatnonzero(distances <= limit), query)
    return top_events(np, events, scores, cut)


def cut_threshold(np: Any, merged: Any, cut: int, size: int | None = None) -> float:
    """The `cut`-th best of the shards' top scores (all of them pass when there are no more
    than `cut`). `size`: how many scores there are when `merged` holds only the best of them
    (at least `cut`: the scatter's owners send only those that can be the `cut`-th best)."""
    if (len(merged) if size is None else size) > cut:
        return float(np.partition(merged, len(merged) - cut)[len(merged) - cut])
    return float(-np.inf)


def join_events(conn: Conn, events: Any, scores: Any, plan: Mapping[str, Any]
                ) -> list[Candidate]:
    """The events (with their dense scores) of one shard that pass the request's filters, as
    candidates carrying `dense`."""
    where, params = _where(plan)
    score = dict(zip(events.tolist(), scores.tolist(), strict=True))
    rows = conn.execute(f"SELECT {_COLUMNS} FROM events e{_JOINS}"
                        f" WHERE e.id IN (SELECT value FROM json_each(?)) AND {where}",
                        [dumps(list(score)), *params])
    found = []
    for r in rows:
        c = _candidate(r, 0)
        c["dense"] = score[int(r[0])]
        found.append(c)
    return found


def _dense_top(conns: Sequence[Conn], shards: Sequence[_ShardVectors], query: Any,
               plan: Mapping[str, Any], need: int, distances: Sequence[Any],
               histogram: Any) -> list[Candidate]:
    """The best `need` events of all shards passing the filters, by dense score (each
    candidate carries `dense`: its cosine times the query's int8 norm). `distances`: each
    shard's sign-bit distances and `histogram` their counts over all shards (None each on an
    index scored exactly).

    Each shard's best `cut` events are merged and cut again at the `cut`-th best score of all
    of them (ties kept): every event left out scores below that, so only those at or above it
    are joined to their rows (a page's worth, not one per shard); `cut` grows while the filters
    leave fewer than `need`. (indexer/scatter.py answers the same over shard owners.)"""
    np = _numpy()
    total = sum(len(v.events) for v in shards)
    cut = first_cut(need)
    while True:
        limit = shortlist_limit(np, total, histogram, cut)
        tops = _shared([partial(shard_tops, np, v, query, limit, cut, d)
                        for v, d in zip(shards, distances, strict=True)])
        threshold = cut_threshold(np, np.concatenate([t[1] for t in tops]), cut)
        found: list[Candidate] = []
        for conn, (events, scores, _) in zip(conns, tops, strict=True):
            keep = scores >= threshold
            if keep.any():
                found.extend(join_events(conn, events[keep], scores[keep], plan))
        done = enough(found, need, limit is None and threshold == -np.inf
                      and all(t[2] for t in tops))
        if done is not None:
            return done
        cut *= GROW


class _Jobs:
    """Jobs shared out over a search's lanes: whichever thread is free takes the next one
    (the caller and a pool thread alike). No job waits on anything, so a pool thread never
    blocks; the caller waits only for a job a pool thread already took."""

    def __init__(self, jobs: Sequence[Callable[[], Any]]) -> None:
        self.jobs = jobs
        self.results: list[Any] = [None] * len(jobs)
        self.errors: list[BaseException | None] = [None] * len(jobs)
        self._next = 0
        self._lock = Lock()

    def work(self) -> None:
        while True:
            with self._lock:
                at = self._next
                self._next += 1
            if at >= len(self.jobs):
                return
            try:
                self.results[at] = self.jobs[at]()
            except BaseException as exc:  # re-raised by `outcome`, in job order
                self.errors[at] = exc

    def outcome(self) -> list[Any]:
        for error in self.errors:
            if error is not None:
                raise error
        return self.results


_pool: ThreadPoolExecutor | None = None
_pool_lock = Lock()


def _submit(fn: Callable[[], None]) -> Future[None] | None:
    """`fn` on the search pool (LANES - 1 threads); None: one lane, the caller runs it all."""
    global _pool
    if LANES <= 1:
        return None
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(LANES - 1, thread_name_prefix="recall-dense")
        return _pool.submit(fn)


def _join(future: Future[None] | None) -> None:
    """Wait for `future`'s jobs unless it has not started (another search holds the pool:
    the caller has done them)."""
    if future is not None and not future.cancel():
        future.result()


def _shared(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """The jobs' results, in order, the work shared between this thread and the pool."""
    shared = _Jobs(jobs)
    future = _submit(shared.work) if len(jobs) > 1 else None
    shared.work()
    _join(future)
    return shared.outcome()


def _pass(np: Any, vectors: _ShardVectors, words: Any) -> tuple[Any, Any]:
    """One shard's sign-bit distances to the query's `words` and their histogram."""
    distances = vectors.hamming(words)
    return distances, distance_histogram(np, distances)


def sign_passes(np: Any, shards: Sequence[_ShardVectors], query: Any
                ) -> tuple[list[Any], Any]:
    """Each shard's sign-bit distances to `query` and their histogram over all shards, the
    shards shared out over the lanes; None each when the index is scored exactly (no more than
    SHORTLIST vectors)."""
    if sum(len(v.events) for v in shards) <= SHORTLIST:
        return [None] * len(shards), None
    words = query_words(np, query)
    passes = _shared([partial(_pass, np, v, words) for v in shards])
    return [d for d, _ in passes], sum(h for _, h in passes)


def first_cut(need: int) -> int:
    return max(DENSE_MIN, need)


def enough(found: list[Candidate], need: int, exhausted: bool) -> list[Candidate] | None:
    """The best `need` of `found`, once they are enough or every vector was looked at; None:
    grow the cut."""
    if len(found) >= need or exhausted:
        found.sort(key=_dense_key)
        return found[:need]
    return None


def _dense_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    return (-c["dense"], *event_key(c), c["sessionId"])


def _fused_key(c: Mapping[str, Any]) -> tuple[Any, ...]:
    return (-c["fused"], *event_key(c), c["sessionId"])


def query_vector(text: str) -> list[int]:
    """The query's int8 vector (the embedded query, quantized), as the scan reads it. (Not
    divided by its norm: that would leave integers; a constant factor ranks the same.)"""
    np = _numpy()
    unit = load_embedder().embed_query(text)
    return [int(x) for x in np.frombuffer(quantize(np, unit), np.int8)]


def as_query(values: Sequence[int]) -> Any:
    """An int8 query vector as the float32 array the scan multiplies by."""
    np = _numpy()
    if len(values) != DIMENSION:
        raise query_error(INVALID_QUERY, f"a query vector has {DIMENSION} components")
    return np.asarray(values, np.int8).astype(np.float32)


def fuse_depth(fetch: int) -> int:
    """Events each ranking contributes to a fusion for a request of `fetch` rows."""
    return max(FUSE_DEPTH, 4 * fetch)


def dense_search(conns: Sequence[Conn], keys: Sequence[tuple[str, str]], cache: VectorCache,
                 plan: Mapping[str, Any], mode: str,
                 lexical: Callable[[int], list[Candidate]]) -> list[Candidate]:
    """The whole ranking up to `plan["fetch"]` rows for a semantic or hybrid request.

    `lexical(n)` is the lexical ranking's top n (as a lexical request of this plan would rank
    them); hybrid fuses it with the dense top events. The query is embedded first (a table
    lookup: an embedding error is answered before any shard is read)."""
    np = _numpy()
    query = as_query(query_vector(str(plan["query"])))
    fetch = int(plan["fetch"])
    depth = fuse_depth(fetch)
    shards = [cache.shard(key, conn) for conn, key in zip(conns, keys, strict=True)]
    lex = lexical(depth) if mode == "hybrid" else None
    distances, histogram = sign_passes(np, shards, query)
    dense = _dense_top(conns, shards, query, plan, depth, distances, histogram)
    return fuse(dense, lex, plan["scope"], fetch)


def fuse(dense: list[Candidate], lexical: list[Candidate] | None, scope: Scope,
         fetch: int) -> list[Candidate]:
    """The ranking's first `fetch` rows: the dense ranking alone (`lexical` None: semantic
    mode) or fused with the lexical one (hybrid) by reciprocal rank."""
    fused: dict[tuple[str, int], Candidate] = {}
    for rank_, c in enumerate(dense, 1):
        c["fused"] = 1.0 / (RRF_K + rank_) if lexical is not None else c["dense"]
        fused[(c["sessionId"], c["seq"])] = c
    for rank_, c in enumerate(lexical or (), 1):
        at = (c["sessionId"], c["seq"])
        found = fused.get(at)
        if found is None:
            c["fused"] = 1.0 / (RRF_K + rank_)
            fused[at] = c
        else:
            found["fused"] += 1.0 / (RRF_K + rank_)
            found["matches"] = c["matches"]
    ranked = sorted(fused.values(), key=_fused_key)
    if scope == "sessions":
        seen: set[str] = set()
        best = []
        for c in ranked:
            if c["sessionId"] not in seen:
                seen.add(c["sessionId"])
                best.append(c)
        ranked = best
    for c in ranked:
        c.pop("dense", None)
        c.pop("fused", None)
    return ranked[:fetch]
