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

import orjson

from indexer.config import IndexConfig
from indexer.cursor import decode_cursor, encode_cursor, require_generation
from indexer.errors import INVALID_QUERY, query_error
from indexer.filters import check_budgets, compile_clauses, validate_filters
from indexer.lineage import trace_lineage
from indexer.ranking import Candidate, merge_page
from indexer.reads import sort_listing
from indexer.search import search_shard
from indexer.service import prepare_request
from indexer.shard import Shard

#: Scatter a plan to every shard (in shard order); each answer is `{generation, candidates}`.
Scatter = Callable[[dict[str, Any]], list[dict[str, Any]]]


def cursor_instance(key: bytes) -> str:
    """The cursor `instance` of an index signed with `key` (same rule as QueryService)."""
    return hashlib.blake2b(key, digest_size=12, person=b"recall-cursor").hexdigest()


def answer_shard_search(shard: Shard, plan: Mapping[str, Any]) -> dict[str, Any]:
    """Owner side: this shard's generation and top `plan.fetch` candidates, consistently."""
    with shard.reader() as conn:
        conn.execute("BEGIN")
        try:
            meta = shard.meta(conn)
            candidates = search_shard(conn, shard.epoch, dict(plan))
        finally:
            conn.execute("COMMIT")
    return {"generation": f"{meta.epoch}:{meta.generation}", "candidates": candidates}


def answer_shard_listing(shard: Shard, filters: Any, live_since: int) -> list[dict[str, Any]]:
    """Owner side: `{header, lastEventTime}` of this shard's sessions matching session filters."""
    clauses = validate_filters(filters, "session")
    sql, params = compile_clauses(clauses, live_since=live_since)
    where = " AND ".join(["s.header IS NOT NULL", *sql])
    with shard.reader() as conn:
        rows = conn.execute(f"SELECT s.header, s.last_event_time FROM sessions s WHERE {where}",
                            params).fetchall()
    return [{"header": orjson.loads(h), "lastEventTime": t} for h, t in rows]


def answer_shard_headers(shard: Shard) -> list[dict[str, Any]]:
    """Owner side: every session header of this shard (for lineage)."""
    with shard.reader() as conn:
        rows = conn.execute("SELECT header FROM sessions WHERE header IS NOT NULL").fetchall()
    return [orjson.loads(h) for (h,) in rows]


class Coordinator:
    """Cross-shard operations over remote shard owners, with the embedded runtime's exact JSON."""

    def __init__(self, config: IndexConfig, key: bytes) -> None:
        self.config = config
        self.key = key
        self.instance = cursor_instance(key)

    def _live(self, last_event_time: int | None, now_ms: int) -> bool:
        return last_event_time is not None and now_ms - last_event_time <= self.config.live_window_ms

    def search_sessions(self, request: Any, *, now_ms: int, scatter: Scatter) -> dict[str, Any]:
        req = prepare_request(request, "sessions", self.config)
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
                "snippetChars": self.config.snippet_chars, "fetch": offset + req["limit"] + 1}
        answers = scatter(plan)
        generation = ",".join(str(a["generation"]) for a in answers)
        if state is not None:
            require_generation(state, generation)
        rows: list[Candidate] = merge_page([list(a["candidates"]) for a in answers], "sessions",
                                           offset, req["limit"])
        items = [{"header": c["header"], "live": self._live(c["lastEventTime"], now_ms),
                  "persisted": True,
                  "bestMatch": {"sessionId": c["sessionId"], "seq": c["seq"], "type": c["type"],
                                "time": c["time"], "surface": c["surface"],
                                "snippet": c["snippet"]}}
                 for c in rows[:req["limit"]]]
        page: dict[str, Any] = {"items": items}
        if len(rows) > req["limit"]:
            page["nextCursor"] = encode_cursor(
                self.key, instance=self.instance, scope="sessions", fingerprint=req["fingerprint"],
                generation=generation, offset=offset + req["limit"], snapshot=None)
        return page

    def listing(self, answers: Sequence[Sequence[Mapping[str, Any]]],
                now_ms: int) -> list[dict[str, Any]]:
        """Merge shard listings into `list_sessions` order (createdAt desc, id asc)."""
        return sort_listing([{"header": dict(a["header"]),
                              "live": self._live(a["lastEventTime"], now_ms), "persisted": True}
                             for answer in answers for a in answer])

    def check_listing_filters(self, filters: Any) -> None:
        """Validate before scattering, so a bad filter fails once with the right code."""
        check_budgets(validate_filters(filters, "session"), within_session=False)

    @staticmethod
    def trace_session(answers: Sequence[Sequence[Mapping[str, Any]]],
                      session_id: str) -> dict[str, Any]:
        headers = {str(h["id"]): dict(h) for answer in answers for h in answer}
        return trace_lineage(headers, session_id)
