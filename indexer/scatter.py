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

from indexer.config import IndexConfig
from indexer.cursor import decode_cursor, encode_cursor, require_generation
from indexer.dense import DENSE_MODES, not_scattered
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
from indexer.search import search_shard
from indexer.service import prepare_request
from indexer.shard import Shard
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
        titles cross shards); without it, sessions take no title from summaries."""
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
            raise not_scattered()  # (each owner would rank its own shard lexically instead)
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
        answers = scatter(plan)
        generation = ",".join(str(a["generation"]) for a in answers)
        if state is not None:
            require_generation(state, generation)
        rows: list[Candidate] = merge_page([list(a["candidates"]) for a in answers], "sessions",
                                           offset, req["limit"])
        page = rows[:req["limit"]]
        items = [{**record, "bestMatch": {"sessionId": c["sessionId"], "seq": c["seq"],
                                          "type": c["type"], "time": c["time"],
                                          "surface": c["surface"], "snippet": c["snippet"]}}
                 for c, record in zip(page, self.describe_rows(page, len(answers), now_ms),
                                      strict=True)]
        result: dict[str, Any] = {"items": items}
        if len(rows) > req["limit"]:
            result["nextCursor"] = encode_cursor(
                self.key, instance=self.instance, scope="sessions", fingerprint=req["fingerprint"],
                generation=generation, offset=offset + req["limit"], snapshot=None)
        return result

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
