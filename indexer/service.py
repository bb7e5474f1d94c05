"""Storage and read side: QueryService — PROTOCOL §3 searches and reads over a ShardSet, as wire JSON."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from indexer import search as searching
from indexer.config import IndexConfig
from indexer.cursor import decode_cursor, encode_cursor, fingerprint, require_generation
from indexer.database import Conn
from indexer.errors import (
    INVALID_FILTER,
    INVALID_QUERY,
    SEARCH_DISABLED,
    SESSION_NOT_FOUND,
    STALE_CURSOR,
    query_error,
    substring_missing,
)
from indexer.filters import canonical_filters, check_budgets, validate_filters
from indexer.listing import describe, needs_summary
from indexer.locks import Lock
from indexer.matchcount import query_tokens
from indexer.normalize import check_cursor_type, fts_phrase, normalize_query, resolve_limit
from indexer.ranking import Candidate, Scope, merge_page
from indexer.reads import SessionReads
from indexer.search import (
    Floor,
    attach_headers,
    bounded_top,
    choose_index,
    drop_page_data,
    floor_pass,
    floor_size,
    make_snippets,
    search_shard,
)
from indexer.shard import Shard
from indexer.shardset import Progress, ShardSet
from indexer.snapshots import Snapshot, SnapshotRegistry
from indexer.vectorsetting import DENSE_MODES
from projections.hashing import blake2b

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from indexer.dense import VectorCache

#: "lexical" is "token" (the exact ranking); "semantic" and "hybrid" read vectors (dense.py).
_MODES = ("token", "substring", "lexical", *DENSE_MODES)
_CONSISTENCY = ("strict", "snapshot")
#: Shards searched at once (this thread plus a pool): each shard query is CPU-bound inside
#: SQLite, which runs without the GIL, and the machines we target have few cores.
SEARCH_LANES = min(4, os.cpu_count() or 2)
#: ... once the first shard took this long (below it, threads cost more than they save; a
#: much larger threshold leaves mid and common queries on one core, and 0 gains nothing more).
#: On a loaded machine the lanes wait for cores and the gain shrinks (results are the same).
PARALLEL_AFTER_S = 0.0003
#: ... and the other shards' floor passes walk their hits in one call (`recall_top`) once the
#: first shard's took this long (a pass over few hits costs the same either way; over many,
#: the one-call walk is cheaper).
WALK_AFTER_S = 0.0005


_T = TypeVar("_T")


class _FloorPasses:
    """The floor passes of one request, one call per shard: from `recall_scan` where the shard
    is one merged segment; elsewhere the first shard runs alone (`_scatter`) and how long it
    took picks how the others walk their hits (many hits: `recall_top`, search.py)."""

    def __init__(self, phrase: str, size: int, tokens: tuple[str, ...]) -> None:
        self.phrase = phrase
        self.size = size
        self.tokens = tokens
        self.walk: bool | None = None

    def __call__(self, conn: Conn) -> Floor:
        if self.walk is not None:
            return floor_pass(conn, self.phrase, self.size, walk=self.walk, tokens=self.tokens)
        started = time.perf_counter()
        found = floor_pass(conn, self.phrase, self.size, tokens=self.tokens)
        self.walk = time.perf_counter() - started >= WALK_AFTER_S
        return found


def _hit(c: Mapping[str, Any]) -> dict[str, Any]:
    return {"sessionId": c["sessionId"], "seq": c["seq"], "type": c["type"], "time": c["time"],
            "surface": c["surface"], "snippet": c["snippet"]}


def prepare_request(request: Any, scope: Scope, config: IndexConfig) -> dict[str, Any]:
    """PROTOCOL §3.3's normalization in order, filters, budgets and the request fingerprint."""
    if config.open_at == "never":
        raise query_error(SEARCH_DISABLED, "session search is disabled (openAt: never)")
    if not isinstance(request, Mapping):
        raise query_error(INVALID_QUERY, "request must be an object")
    req = copy.deepcopy(dict(request))  # later caller edits must not leak into a queued request
    session_id = None
    if scope == "events":
        session_id = req.get("sessionId")
        if not isinstance(session_id, str):
            raise query_error(INVALID_FILTER, "sessionId must be a string")
        session_clauses: list[Any] = []
        event_clauses = validate_filters(req.get("filters"), "event")
    else:
        session_clauses = validate_filters(req.get("sessionFilters"), "session")
        event_clauses = validate_filters(req.get("eventFilters"), "event")
    cursor = check_cursor_type(req.get("cursor"))
    query = normalize_query(req.get("query"))
    limit = resolve_limit(req.get("limit"), config)
    check_budgets([*session_clauses, *event_clauses], within_session=scope == "events")
    mode = req.get("mode", "token")
    if mode not in _MODES:
        raise query_error(INVALID_QUERY, f"mode must be one of {_MODES}")
    if mode == "lexical":
        mode = "token"
    index = choose_index(query, mode)
    consistency = req.get("consistency", "strict")
    if consistency not in _CONSISTENCY:
        raise query_error(INVALID_QUERY, f"consistency must be one of {_CONSISTENCY}")
    session_canon = canonical_filters(session_clauses)
    event_canon = canonical_filters(event_clauses)
    print_: dict[str, Any] = {"scope": scope}
    if session_id is not None:
        print_["sessionId"] = session_id
    print_.update({"query": query, "filters": session_canon + event_canon, "limit": limit,
                   "mode": mode, "consistency": consistency})
    return {"scope": scope, "sessionId": session_id, "query": query, "limit": limit,
            "cursor": cursor, "index": index, "mode": mode, "consistency": consistency,
            "sessionFilters": session_canon, "eventFilters": event_canon,
            "fingerprint": fingerprint(print_)}


class QueryService(SessionReads):
    """Searches and reads.

    `instance` names the index, not the process: it is derived from the index's signing key, so
    a CLI invocation can follow the cursor the previous one printed and every query worker of a
    fleet accepts the others' cursors. What makes a cursor unusable is a change of the index
    (generations, STALE) or of the request (fingerprint, INVALID) — a restart alone is not.
    Snapshot cursors are the exception: their pinned read transaction lives in one process."""

    def __init__(self, shardset: ShardSet, config: IndexConfig | None = None, *,
                 clock: Callable[[], float] = time.time,
                 progress: Progress | None = None, build_substring: bool = True,
                 keep_threads: bool = True) -> None:
        """`progress(shard, done, total)` reports an index build a request needs first (the
        substring index of an index created without it). With `build_substring` false a
        search never builds: one that needs the substring index where it is missing is
        RECALL_SUBSTRING_INDEX_MISSING (a Kafka shard owner: a read must not turn into a long
        write inside a query worker; `build_substring_index` is the explicit step).
        `keep_threads` false: a parallel search starts its lanes' threads and joins them
        instead of keeping a pool (a short-lived process: one search, and no
        concurrent.futures or logging to load for it)."""
        super().__init__(shardset, config or shardset.config, clock=clock)
        self.progress = progress
        self.build_substring = build_substring
        self.keep_threads = keep_threads
        self.instance = str(blake2b(shardset.key, digest_size=12,
                                    person=b"recall-cursor").hexdigest())
        self.snapshots = SnapshotRegistry(self.config.snapshot_retention_s,
                                          self.config.max_snapshots, clock=clock)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = Lock()
        self._vectors: VectorCache | None = None

    @property
    def vectors(self) -> VectorCache:
        """The shards' vectors as semantic and hybrid searches read them (made on first use:
        a lexical search loads no vector code)."""
        with self._pool_lock:
            if self._vectors is None:
                from indexer.dense import VectorCache

                self._vectors = VectorCache()
            return self._vectors

    def close(self) -> None:
        self.snapshots.close()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- request normalization (PROTOCOL §3.3 order) --

    def _prepare(self, request: Any, scope: Scope) -> dict[str, Any]:
        req = prepare_request(request, scope, self.config)
        if req["mode"] in DENSE_MODES:
            from indexer.dense import check_vectors
            from indexer.semantic import require_extra

            require_extra()
            for shard in self.shardset:
                check_vectors(shard.semantic)
        if req["mode"] == "substring" and not self.shardset.has_substring():
            if self.build_substring:
                # An index created without substring coverage: build it now, once.
                self.shardset.ensure_substring(self.progress)
            else:
                # Only the shards this search reads: a Kafka owner answers for its own.
                wanted = (None if scope == "sessions"
                          else [self.shardset.shard_for(req["sessionId"]).index])
                lacking = self.shardset.lacking_substring(wanted)
                if lacking:
                    raise substring_missing(lacking)
        return req

    def substring_index(self, shards: Iterable[int] | None = None) -> dict[str, Any]:
        """`{built: all|none|partial, lacking: [shard, …]}`: which shards' trigram index covers
        every document (of `shards`, default all)."""
        chosen = list(range(len(self.shardset.shards))) if shards is None else list(shards)
        lacking = self.shardset.lacking_substring(chosen)
        built = "all" if not lacking else "none" if len(lacking) == len(chosen) else "partial"
        return {"built": built, "lacking": lacking}

    def build_substring_index(self, shards: Iterable[int] | None = None) -> dict[str, Any]:
        """The explicit build (a write): extend the trigram index of every shard (of `shards`)
        to every document; `{documentsAdded}` (0 where it was built already)."""
        return {"documentsAdded": self.shardset.ensure_substring(self.progress, only=shards)}

    # -- generations --

    @staticmethod
    def _shard_generation(shard: Shard, conn: Conn) -> str:
        meta = shard.meta(conn)
        return f"{meta.epoch}:{meta.generation}"

    def _session_generation(self, shard: Shard, conn: Conn, session_id: str) -> str:
        row = conn.execute("SELECT revision FROM sessions WHERE id = ? AND header IS NOT NULL",
                           (session_id,)).fetchone()
        if row is None:
            raise query_error(SESSION_NOT_FOUND, f"session {session_id!r} not found")
        return f"{shard.meta(conn).epoch}:{row[0]}"

    def _generation(self, req: dict[str, Any], conns: dict[int, Conn]) -> str:
        if req["scope"] == "events":
            shard = self.shardset.shard_for(req["sessionId"])
            return self._session_generation(shard, conns[shard.index], req["sessionId"])
        return ",".join(self._shard_generation(s, conns[s.index]) for s in self.shardset)

    # -- the search flow: prepare → resolve cursor → scatter → merge → page --

    @contextmanager
    def _connections(self, shards: list[Shard],
                     snap: Snapshot | None) -> Iterator[dict[int, Conn]]:
        """The connections a request reads: its snapshot's (one request at a time), or a pooled
        reader per shard."""
        if snap is not None:
            with snap.lock:
                yield snap.conns
            return
        with ExitStack() as stack:
            yield {s.index: stack.enter_context(s.reader()) for s in shards}

    def _run(self, req: dict[str, Any], now_ms: int) -> tuple[list[Candidate], str | None, Any]:
        scope: Scope = req["scope"]
        shards = ([self.shardset.shard_for(req["sessionId"])] if scope == "events"
                  else list(self.shardset))
        snap: Snapshot | None = None
        offset = 0
        state = None
        if req["cursor"] is not None:
            state = decode_cursor(self.shardset.key, req["cursor"], instance=self.instance,
                                  scope=scope, fingerprint=req["fingerprint"])
            offset = state.offset
            if req["consistency"] == "snapshot":
                snap = self.snapshots.get(state.snapshot)
                if snap is None:
                    raise query_error(STALE_CURSOR, "the snapshot behind this cursor expired",
                                      hint="retry the complete search")
        elif req["consistency"] == "snapshot":
            snap = self.snapshots.pin(shards)
        with self._connections(shards, snap) as conns:
            if state is not None:
                require_generation(state, snap.generation if snap else self._generation(req, conns))
            generation = self._generation(req, conns)
            if snap is not None and not snap.generation:
                snap.generation = generation
            session_header = None
            if scope == "events":
                session_header = self._header_on(conns[shards[0].index], req["sessionId"])
            plan = {"scope": scope, "sessionId": req["sessionId"], "query": req["query"],
                    "sessionFilters": req["sessionFilters"], "eventFilters": req["eventFilters"],
                    "liveSince": now_ms - self.config.live_window_ms, "index": req["index"],
                    "snippetChars": self.config.snippet_chars, "fetch": offset + req["limit"] + 1}
            plan["snippets"] = False  # made below for the page's rows only
            epochs = {s.index: s.epoch for s in shards}
            if req["mode"] in DENSE_MODES:
                rows = self._dense(shards, conns, plan, req["mode"])[offset:]
            else:
                results = self._search([conns[s.index] for s in shards],
                                       [s.epoch for s in shards], plan)
                rows = merge_page(results, scope, offset, req["limit"])
            page = rows[:req["limit"]]
            by_shard: dict[int, list[Candidate]] = {}
            for c in page:
                by_shard.setdefault(self.shardset.shard_for(c["sessionId"]).index, []).append(c)
            make_snippets([(conns[i], epochs[i], found) for i, found in by_shard.items()], plan)
            if scope == "sessions":
                for index, found in by_shard.items():
                    attach_headers(conns[index], found)
            drop_page_data(page)
        next_cursor = None
        if len(rows) > req["limit"]:
            next_cursor = encode_cursor(
                self.shardset.key, instance=self.instance, scope=scope,
                fingerprint=req["fingerprint"], generation=generation,
                offset=offset + req["limit"], snapshot=snap.id if snap else None)
        elif snap is not None:
            self.snapshots.release(snap.id)
        return page, next_cursor, session_header

    def _dense(self, shards: list[Shard], conns: dict[int, Conn], plan: dict[str, Any],
               mode: str) -> list[Candidate]:
        """A semantic or hybrid ranking (dense.py); its lexical half is this service's."""
        def lexical(n: int) -> list[Candidate]:
            lex = {**plan, "fetch": n}
            found = self._search([conns[s.index] for s in shards], [s.epoch for s in shards],
                                 lex)
            # (exactly n: merge_page keeps one more row than a page, which the one list
            # of a bounded search does not have; the scatter's lexical half is cut alike)
            return merge_page(found, plan["scope"], 0, n)[:n]

        from indexer.dense import dense_search

        return dense_search([conns[s.index] for s in shards],
                            [(s.file, s.epoch) for s in shards], self.vectors, plan, mode,
                            lexical)

    def _search(self, conns: list[Conn], epochs: list[str],
                plan: dict[str, Any]) -> list[list[Candidate]]:
        """Each shard's top candidates (or, token searches across sessions, the top of all
        shards at once: floor passes on every shard, then one bounded join; search.py)."""
        if plan["index"] == "token" and plan["scope"] == "sessions":
            phrase = fts_phrase(plan["query"])
            tokens = query_tokens(plan["query"])
            size = floor_size(plan)
            # A phrase with a long doclist on the first shard has long ones on all: the
            # shards go to the lanes at once instead of timing the first one alone.
            heavy = len(conns) > 1 and searching.many_pages(conns[0], tokens)
            for _ in range(2):
                floors = self._scatter([(c,) for c in conns],
                                       _FloorPasses(phrase, size, tokens), parallel=heavy)
                found = bounded_top(conns, floors, plan)
                if found is not None:
                    return [found]
                size *= searching.GROWTH  # (read at run time: tests shrink it)
        return self._scatter([(c, e, plan) for c, e in zip(conns, epochs, strict=True)],
                             search_shard)

    def _scatter(self, calls: list[tuple[Any, ...]], fn: Callable[..., _T], *,
                 parallel: bool = False) -> list[_T]:
        """`fn` over each shard's connection; results (or the first error) in shard order.

        The first shard runs here (unless `parallel`: the caller knows the calls are slow);
        if it was quick (a selective query) so are the others, and
        they run here too, since handing them to threads would cost more than it saves. Else
        the rest run in SEARCH_LANES interleaved lanes: this thread takes one, a small pool the
        others (threads of their own without `keep_threads`; APSW releases the GIL while a
        statement runs). Each connection is in exactly
        one lane and all lanes finish before this returns, also on error, so no connection is
        ever used by two threads at once."""
        if not calls:
            return []
        done: list[Any] = []
        rest = calls
        if not parallel:
            started = time.perf_counter()
            done.append(fn(*calls[0]))
            rest = calls[1:]
            if time.perf_counter() - started < PARALLEL_AFTER_S:
                return [*done, *(fn(*call) for call in rest)]
        lanes = min(SEARCH_LANES, len(rest))
        if lanes <= 1:
            return [*done, *(fn(*call) for call in rest)]
        outcomes: list[Any] = [None] * len(rest)

        def lane(k: int) -> None:
            for i in range(k, len(rest), lanes):
                try:
                    outcomes[i] = fn(*rest[i])
                except BaseException as exc:  # re-raised below, in shard order
                    outcomes[i] = exc
                    return

        if self.keep_threads:
            self._pooled(lanes, lane)
        else:
            import threading  # (only a slow search starts lanes)

            threads: list[threading.Thread] = []
            try:
                for k in range(1, lanes):
                    threads.append(threading.Thread(target=lane, args=(k,),
                                                    name=f"recall-search-{k}"))
                    threads[-1].start()
                lane(0)
            finally:
                for thread in threads:
                    if thread.ident is not None:  # (one that failed to start never ran)
                        thread.join()
        results = done
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
        return results

    def _pooled(self, lanes: int, lane: Callable[[int], None]) -> None:
        """Lanes 1.. on the kept pool, lane 0 here; returns when all are done."""
        with self._pool_lock:
            if self._pool is None:
                # concurrent.futures (and logging) load for a slow query only
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=SEARCH_LANES - 1,
                                                thread_name_prefix="recall-search")
            pool = self._pool
        from concurrent.futures import wait

        futures = [pool.submit(lane, k) for k in range(1, lanes)]
        try:
            lane(0)
        finally:
            wait(futures)

    def search_sessions(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        """`{items: [{header, live, persisted, …listing fields, bestMatch}], nextCursor?}`
        (PROTOCOL §3.8; the listing fields of indexer/listing.py added)."""
        now = self._now_ms(now_ms)
        req = self._prepare(request, "sessions")
        rows, next_cursor, _ = self._run(req, now)
        summaries = self.summaries() if any(needs_summary(c) for c in rows) else {}
        items = [{**describe(c, self._live(c["lastEventTime"], now), summaries),
                  "bestMatch": _hit(c)} for c in rows]
        page: dict[str, Any] = {"items": items}
        if next_cursor is not None:
            page["nextCursor"] = next_cursor
        return page

    def search_events(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        """`{session, items: [hit], nextCursor?}`; `session` comes from the same generation."""
        req = self._prepare(request, "events")
        rows, next_cursor, header = self._run(req, self._now_ms(now_ms))
        page: dict[str, Any] = {"session": header, "items": [_hit(c) for c in rows]}
        if next_cursor is not None:
            page["nextCursor"] = next_cursor
        return page
