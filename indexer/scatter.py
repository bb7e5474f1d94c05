"""Storage and read side: cross-shard requests when the shards live with different owners.

The owner of shard k answers `answer_shard_search` (its generation and top candidates, read in
one transaction so the two agree) and `answer_shard_listing` / `answer_shard_headers`; whoever
coordinates (a query worker) merges the answers with exactly the ranking and paging of the
single-process QueryService, so a fleet answers byte for byte what the embedded runtime does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from indexer import dense
from indexer.config import IndexConfig
from indexer.cursor import decode_cursor, encode_cursor, require_generation
from indexer.dense import VectorCache
from indexer.errors import INVALID_QUERY, query_error, substring_missing
from indexer.filters import check_budgets, compile_clauses, validate_filters
from indexer.lineage import trace_lineage
from indexer.listing import (
    SummaryTitles,
    answer_shard_leaves,
    answer_shard_summaries,
    describe,
    needs_summary,
    shard_rows,
    sort_listing,
)
from indexer.ranking import Candidate, merge_page
from indexer.routing import shard_of
from indexer.search import attach_headers, drop_page_data, make_snippets, search_shard
from indexer.semantic import require_extra
from indexer.service import prepare_request
from indexer.shard import Shard
from indexer.vectorsetting import DENSE_MODES
from projections.codec import loads

#: Scatter a plan to every shard (in shard order); each answer is `{generation, candidates}`.
Scatter = Callable[[dict[str, Any]], list[dict[str, Any]]]
#: Scatter one shard operation (`answer_shard_op`) to every shard; the answers in shard order.
ScatterOp = Callable[[str, dict[str, Any]], list[Any]]


def cursor_instance(key: bytes) -> str:
    """The cursor `instance` of an index signed with `key` (same rule as QueryService)."""
    return hashlib.blake2b(key, digest_size=12, person=b"recall-cursor").hexdigest()


def answer_shard_search(shard: Shard, plan: Mapping[str, Any]) -> dict[str, Any]:
    """Owner side: this shard's generation and top `plan.fetch` candidates, consistently.

    A substring search on a shard whose trigram index holds only CJK documents is
    RECALL_SUBSTRING_INDEX_MISSING, never built here (a read) nor answered from what the index
    holds (the coordinator would merge a silently incomplete answer)."""
    with shard.reader() as conn:
        conn.execute("BEGIN")
        try:
            meta = shard.meta(conn)
            if plan.get("mode") == "substring" and not meta.substring:
                raise substring_missing([shard.index])
            candidates = search_shard(conn, shard.epoch, dict(plan))
        finally:
            conn.execute("COMMIT")
    return {"generation": f"{meta.epoch}:{meta.generation}", "candidates": candidates}


#: The shard operations of a search by meaning across owners (`answer_shard_dense`).
DENSE_OPS = ("shard.dense_counts", "shard.dense_top", "shard.dense_page")
#: Searches by meaning asked again from the start when a shard changed between their rounds.
DENSE_ATTEMPTS = 3


def answer_shard_dense(shard: Shard, cache: VectorCache, op: str,
                       args: Mapping[str, Any]) -> dict[str, Any]:
    """Owner side of a semantic or hybrid search across sessions (the coordinator's rounds in
    `Coordinator._dense_rows`), each read in one transaction with the shard's generation.

    `shard.dense_counts`: the shard's vector count and how many of its vectors lie at each
    sign-bit (Hamming) distance from the query (what the shortlist's global cut-off needs),
    and, for hybrid, its lexical candidates of `args.lexical` (a plan). `shard.dense_top`:
    the shard's `top_events` for the cut `args.cut` within distance `args.limit`, the scores of
    those at or above its own `cut`-th best (every score the global `cut`-th best can be, since
    it is never below a shard's) and, of those, the events that pass the filters, with their
    scores. `shard.dense_page`: snippets and listing rows of the page's rows on this shard."""
    np = dense._numpy()
    with shard.reader() as conn:
        conn.execute("BEGIN")
        try:
            meta = shard.meta(conn)
            generation = f"{meta.epoch}:{meta.generation}"
            if op == "shard.dense_page":
                rows = [dict(c) for c in args["rows"][shard.index]]
                plan = args["plan"]
                make_snippets([(conn, shard.epoch, rows)], plan)
                attach_headers(conn, rows)
                drop_page_data(rows)
                return {"generation": generation, "candidates": rows}
            dense.check_vectors(shard.semantic)
            vectors = cache.shard((shard.file, shard.epoch), conn)
            query = dense.as_query(args["vector"])
            if op == "shard.dense_counts":
                histogram = dense.distance_histogram(
                    np, vectors.hamming(dense.query_words(np, query)))
                lexical: list[Candidate] = []
                if args.get("lexical") is not None:
                    lexical = search_shard(conn, shard.epoch, dict(args["lexical"]))
                    drop_page_data(lexical)
                return {"generation": generation, "count": len(vectors.events),
                        "histogram": [int(n) for n in histogram], "lexical": lexical}
            if op != "shard.dense_top":
                raise query_error(INVALID_QUERY, f"unknown shard operation {op!r}")
            cut = int(args["cut"])
            limit = None if args.get("limit") is None else int(args["limit"])
            events, scores, complete = dense.shard_tops(np, vectors, query, limit, cut)
            keep = scores >= dense.cut_threshold(np, scores, cut)
            candidates = (dense.join_events(conn, events[keep], scores[keep], args["plan"])
                          if keep.any() else [])
            return {"generation": generation, "size": len(scores), "complete": bool(complete),
                    "scores": scores[keep].tolist(), "candidates": candidates}
        finally:
            conn.execute("COMMIT")


def answer_shard_listing(shard: Shard, filters: Any, live_since: int,
                         limit: int | None = None) -> list[dict[str, Any]]:
    """Owner side: the listing rows (indexer/listing.py) of this shard's sessions matching
    session filters (the first `limit` in listing order)."""
    clauses = validate_filters(filters, "session")
    sql, params = compile_clauses(clauses, live_since=live_since)
    with shard.reader() as conn:
        return shard_rows(conn, " AND ".join(sql), params, limit)


def answer_shard_op(shard: Shard, op: str, args: Mapping[str, Any]) -> Any:
    """Owner side of the listing's cross-shard questions (`shard.summaries`, `shard.leaves`);
    None for an operation this function does not answer."""
    if op == "shard.summaries":
        known = args.get("known") or []
        return answer_shard_summaries(shard, known[shard.index] if shard.index < len(known)
                                      else None)
    if op == "shard.leaves":
        return answer_shard_leaves(shard, [int(k) for k in args.get("keys") or []])
    return None


def answer_shard_headers(shard: Shard) -> list[dict[str, Any]]:
    """Owner side: every session header of this shard (for lineage)."""
    with shard.reader() as conn:
        rows = conn.execute("SELECT header FROM sessions WHERE header IS NOT NULL").fetchall()
    return [loads(h) for (h,) in rows]


class Coordinator:
    """Cross-shard operations over remote shard owners, with the embedded runtime's exact JSON."""

    def __init__(self, config: IndexConfig, key: bytes, *,
                 scatter: ScatterOp | None = None) -> None:
        """`scatter(op, args)` asks every shard owner `answer_shard_op` questions (summary
        titles cross shards) and `answer_shard_dense` ones (searches by meaning); without it,
        sessions take no title from summaries and a search by meaning is not served."""
        self.config = config
        self.key = key
        self.instance = cursor_instance(key)
        self.scatter = scatter
        self.summary_titles = SummaryTitles()

    def summaries(self, shards: int) -> dict[str, str]:
        """Session id → the title a Claude Code summary in any session's log gives it."""
        scatter = self.scatter
        if scatter is None:
            return {}
        return self.summary_titles.titles(
            shards, lambda known: scatter("shard.summaries", {"known": known}),
            lambda keys: scatter("shard.leaves", {"keys": keys}))

    def describe_rows(self, rows: Sequence[Mapping[str, Any]], shards: int,
                      now_ms: int) -> list[dict[str, Any]]:
        summaries = self.summaries(shards) if any(needs_summary(r) for r in rows) else {}
        return [describe(r, self._live(r["lastEventTime"], now_ms), summaries) for r in rows]

    def _live(self, last_event_time: int | None, now_ms: int) -> bool:
        return last_event_time is not None and now_ms - last_event_time <= self.config.live_window_ms

    def search_sessions(self, request: Any, *, now_ms: int, scatter: Scatter) -> dict[str, Any]:
        req = prepare_request(request, "sessions", self.config)
        if req["mode"] in DENSE_MODES:
            require_extra()  # (the coordinator embeds the query, once for every owner)
            if self.scatter is None:
                raise dense.not_scattered()
        if req["consistency"] == "snapshot":
            raise query_error(INVALID_QUERY, "snapshot paging is served by the embedded runtime",
                              hint="use consistency: strict over Kafka")
        state = None
        offset = 0
        if req["cursor"] is not None:
            state = decode_cursor(self.key, req["cursor"], instance=self.instance,
                                  scope="sessions", fingerprint=req["fingerprint"])
            offset = state.offset
        plan = {"scope": "sessions", "sessionId": None, "query": req["query"],
                "sessionFilters": req["sessionFilters"], "eventFilters": req["eventFilters"],
                "liveSince": now_ms - self.config.live_window_ms, "index": req["index"],
                "mode": req["mode"], "snippetChars": self.config.snippet_chars,
                "fetch": offset + req["limit"] + 1}
        rows: list[Candidate]
        if req["mode"] in DENSE_MODES:
            rows, generation = self._dense_rows(plan, req["mode"], state)
            rows = rows[offset:]
            shards = len(generation.split(","))
        else:
            answers = scatter(plan)
            generation = ",".join(str(a["generation"]) for a in answers)
            if state is not None:
                require_generation(state, generation)
            rows = merge_page([list(a["candidates"]) for a in answers], "sessions", offset,
                              req["limit"])
            shards = len(answers)
        page = rows[:req["limit"]]
        if req["mode"] in DENSE_MODES:
            page = self._dense_page(plan, page, generation)
        items = [{**record, "bestMatch": {"sessionId": c["sessionId"], "seq": c["seq"],
                                          "type": c["type"], "time": c["time"],
                                          "surface": c["surface"], "snippet": c["snippet"]}}
                 for c, record in zip(page, self.describe_rows(page, shards, now_ms),
                                      strict=True)]
        result: dict[str, Any] = {"items": items}
        if len(rows) > req["limit"]:
            result["nextCursor"] = encode_cursor(
                self.key, instance=self.instance, scope="sessions", fingerprint=req["fingerprint"],
                generation=generation, offset=offset + req["limit"], snapshot=None)
        return result

    def _dense_rows(self, plan: Mapping[str, Any], mode: str,
                    state: Any) -> tuple[list[Candidate], str]:
        """The first `plan.fetch` rows of a semantic or hybrid ranking over the shard owners,
        exactly as `dense.dense_search` ranks them in one process, and the generation read.

        Round 1 (`shard.dense_counts`): every owner's vector count and Hamming histogram, so
        the shortlist's cut-off is set over all shards together as the embedded runtime sets
        it (and hybrid's lexical candidates). Round 2 (`shard.dense_top`, again with a larger
        cut while the filters leave too few): each owner's top scores and its filtered events
        above its own cut; the global threshold and the best events follow as in
        `dense._dense_top`. A shard whose generation changed between the rounds has the search
        asked again (at most DENSE_ATTEMPTS times; the last answer stands, with the generation
        of its last round, so a cursor from it is stale once anything changed)."""
        scatter = self.scatter
        assert scatter is not None
        np = dense._numpy()
        vector = dense.query_vector(str(plan["query"]))
        fetch = int(plan["fetch"])
        depth = dense.fuse_depth(fetch)
        lexical_plan = {**plan, "fetch": depth} if mode == "hybrid" else None
        for attempt in range(DENSE_ATTEMPTS):
            last = attempt == DENSE_ATTEMPTS - 1
            counts = scatter("shard.dense_counts", {"vector": vector, "lexical": lexical_plan})
            generations = [str(a["generation"]) for a in counts]
            if state is not None:
                require_generation(state, ",".join(generations))
            total = sum(int(a["count"]) for a in counts)
            histogram = np.sum([np.asarray(a["histogram"], np.int64) for a in counts], axis=0)
            cut = dense.first_cut(depth)
            while True:
                limit = dense.shortlist_limit(np, total, histogram, cut)
                tops = scatter("shard.dense_top", {"vector": vector, "plan": plan, "cut": cut,
                                                   "limit": limit})
                latest = [str(a["generation"]) for a in tops]
                if latest != generations and not last:
                    break  # (asked again from round 1)
                size = sum(int(a["size"]) for a in tops)
                sent = np.asarray([x for a in tops for x in a["scores"]], np.float64)
                # the `cut`-th best of all shards' top scores: every score that can be it was
                # sent (at least `cut` of them whenever there are more than `cut` in all)
                threshold = dense.cut_threshold(np, sent, cut, size)
                found = [dict(c) for a in tops for c in a["candidates"]
                         if float(c["dense"]) >= threshold]
                done = dense.enough(found, depth, limit is None and threshold == -np.inf
                                    and all(bool(a["complete"]) for a in tops))
                if done is not None:
                    lexical = (merge_page([list(a["lexical"]) for a in counts], "sessions", 0,
                                          depth)[:depth] if mode == "hybrid" else None)
                    return dense.fuse(done, lexical, "sessions", fetch), ",".join(latest)
                cut *= dense.GROW
        raise AssertionError("the last attempt always answers")

    def _dense_page(self, plan: Mapping[str, Any], page: list[Candidate],
                    generation: str) -> list[Candidate]:
        """The page's rows with their snippets and listing rows, made by their shards' owners
        (`shard.dense_page`), in page order."""
        scatter = self.scatter
        assert scatter is not None
        if not page:
            return page
        shards = len(generation.split(","))
        rows: list[list[Candidate]] = [[] for _ in range(shards)]
        for c in page:
            rows[shard_of(str(c["sessionId"]), shards)].append(c)
        answers = scatter("shard.dense_page", {"plan": plan, "rows": rows})
        made = {(str(c["sessionId"]), int(c["seq"])): c for a in answers
                for c in a["candidates"]}
        return [made[(str(c["sessionId"]), int(c["seq"]))] for c in page]

    def listing(self, answers: Sequence[Sequence[Mapping[str, Any]]],
                now_ms: int) -> list[dict[str, Any]]:
        """Merge shard listings (`answer_shard_listing`, in shard order) into listing records
        in `list_sessions` order (createdAt desc, id asc)."""
        rows = [row for answer in answers for row in answer]
        return sort_listing(self.describe_rows(rows, len(answers), now_ms))

    def check_listing_filters(self, filters: Any) -> None:
        """Validate before scattering, so a bad filter fails once with the right code."""
        check_budgets(validate_filters(filters, "session"), within_session=False)

    @staticmethod
    def trace_session(answers: Sequence[Sequence[Mapping[str, Any]]],
                      session_id: str) -> dict[str, Any]:
        headers = {str(h["id"]): dict(h) for answer in answers for h in answer}
        return trace_lineage(headers, session_id)
