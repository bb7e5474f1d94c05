"""Request handling over Kafka: shard owners answer shard requests; coordinators answer requests.

A request on `<p>.requests` is taken by any query worker (the coordinator). Cross-session
operations scatter to every partition of `<p>.shard-requests`, whose partition k is read by the
owner of shard k (the index consumer, co-partitioned with `<p>.documents`), and are merged with
the embedded runtime's exact ranking (indexer.scatter). Single-session operations are forwarded
whole to the one owner. The JSON that comes back equals the embedded runtime's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from indexer import QueryService, ShardSet
from indexer.digest import combine_digests, merge_coverage, session_digests, shard_coverage
from indexer.errors import SUBSTRING_INDEX_MISSING, substring_missing
from indexer.listing import checked_limit, select_listing
from indexer.routing import shard_of
from indexer.scatter import (
    DENSE_OPS,
    Coordinator,
    answer_shard_dense,
    answer_shard_headers,
    answer_shard_listing,
    answer_shard_op,
    answer_shard_search,
)
from projections.errors import RecallError, SessionQueryError
from streams.core.settings import Settings
from streams.service.operations import dispatch
from streams.service.reference import ReferenceService

if TYPE_CHECKING:
    from streams.runtime.kafka.workspaces import WorkspaceQuery

#: Operations a shard owner answers from its local shard (single-session ones run whole).
SINGLE_SESSION_OPS = ("search_events", "read_session", "read_surface", "read_event",
                      "read_transcript", "trace_event", "filter_events")


class _Local:
    """Backend shape for `dispatch` over a local QueryService (shard-owner side)."""

    def __init__(self, query: QueryService) -> None:
        self._query = query

    def query(self) -> QueryService:
        return self._query

    def reference(self) -> Any:
        raise SessionQueryError("references are prepared by coordinators",
                                code="RECALL_UNKNOWN_OPERATION")

    def generation(self) -> str:
        raise SessionQueryError("the generation is answered by coordinators",
                                code="RECALL_UNKNOWN_OPERATION")


def answer_shard_request(shards: ShardSet, query: QueryService, op: str,
                         args: Mapping[str, Any]) -> Any:
    """Owner side of `<p>.shard-requests`: answer from the local shard `args.shard`."""
    if op in SINGLE_SESSION_OPS:
        return dispatch(_Local(query), op, args)
    shard = shards.shards[int(args["shard"])]
    if op == "shard.search":
        return answer_shard_search(shard, args["plan"])
    if op in DENSE_OPS:  # a search by meaning across sessions (its rounds: indexer.scatter)
        return answer_shard_dense(shard, query.vectors, op, args)
    if op == "shard.listing":
        return answer_shard_listing(shard, args.get("filters"), int(args["liveSince"]),
                                    checked_limit(args.get("limit")))
    if op == "shard.headers":
        return answer_shard_headers(shard)
    if op == "shard.digest":
        # In this process, one shard at a time: the index role keeps a core for indexing (with
        # the digest helpers on both cores, the generation switch right after a reindex, whose
        # reply carries a digest, took 5-7 s instead of 3.4: bench/pipeline.py)
        return {"sessions": session_digests([shard], parallel=False),
                "substring": shard_coverage(shard)}
    if op == "shard.substring_state":
        return {"built": not shards.lacking_substring([shard.index])}
    if op == "shard.substring_build":
        # The explicit build (a write, in a thread: streams.runtime.kafka.indexing); a search
        # never builds (QueryService(build_substring=False), answer_shard_search).
        return query.build_substring_index([shard.index])
    answered = answer_shard_op(shard, op, args)  # the listing's summary-title questions
    if answered is not None:
        return answered
    raise SessionQueryError(f"unknown shard operation {op!r}", code="RECALL_UNKNOWN_OPERATION")


def session_of(op: str, args: Mapping[str, Any]) -> str:
    value = args.get("request", {}).get("sessionId") if op == "search_events" else args.get(
        "sessionId")
    if not isinstance(value, str):
        raise SessionQueryError("sessionId must be a string", code="SESSION_QUERY_INVALID_FILTER")
    return value


class RemoteQuery:
    """QueryService's interface, answered by shard owners over Kafka (coordinator side).

    `call(shard, op, args)` and `scatter(op, args)` are synchronous: the coordinator runs each
    request in a worker thread and they block on the event loop's futures."""

    def __init__(self, settings: Settings, key: bytes,
                 call: Callable[[int, str, dict[str, Any]], Any],
                 scatter: Callable[[str, dict[str, Any]], list[Any]],
                 clock: Callable[[], float] = time.time) -> None:
        from streams.core.indexconfig import index_config

        self.settings = settings
        self.shards = settings.shards
        self.coordinator = Coordinator(index_config(settings), key, scatter=scatter)
        self.call = call
        self.scatter = scatter
        self.clock = clock

    def _now(self, now_ms: int | None) -> int:
        return int(self.clock() * 1000) if now_ms is None else now_ms

    def _route(self, op: str, args: dict[str, Any]) -> Any:
        return self.call(shard_of(session_of(op, args), self.shards), op, args)

    def search_sessions(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        try:
            return self.coordinator.search_sessions(
                request, now_ms=self._now(now_ms),
                scatter=lambda plan: self.scatter("shard.search", {"plan": plan}))
        except RecallError as exc:
            if exc.code != SUBSTRING_INDEX_MISSING:
                raise
            # the first owner's refusal names its shard; the error names every one lacking it
            lacking = self.substring_index()["lacking"]
            if not lacking:
                raise
            raise substring_missing(lacking) from None

    def search_events(self, request: Any, *, now_ms: int | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"request": request}
        if now_ms is not None:
            args["nowMs"] = now_ms
        if not isinstance(request, Mapping):
            raise SessionQueryError("request must be an object", code="SESSION_QUERY_INVALID_QUERY")
        return dict(self._route("search_events", args))

    def list_sessions(self, *, now_ms: int | None = None, limit: int | None = None,
                      title: str | None = None) -> list[dict[str, Any]]:
        return self.filter_sessions(None, now_ms=now_ms, limit=limit, title=title)

    def filter_sessions(self, filters: Any, *, now_ms: int | None = None,
                        limit: int | None = None,
                        title: str | None = None) -> list[dict[str, Any]]:
        now = self._now(now_ms)
        if filters is not None:
            self.coordinator.check_listing_filters(filters)
        checked = checked_limit(limit)
        # A title search needs every shard's titles (summaries cross shards): no limit inward.
        answers = self.scatter("shard.listing", {
            "filters": filters, "liveSince": now - self.coordinator.config.live_window_ms,
            "limit": checked if title is None else None})
        return select_listing(self.coordinator.listing(answers, now), title=title, limit=checked)

    def trace_session(self, session_id: str) -> dict[str, Any]:
        return self.coordinator.trace_session(self.scatter("shard.headers", {}), session_id)

    def read_session(self, session_id: str) -> dict[str, Any]:
        return dict(self._route("read_session", {"sessionId": session_id}))

    def read_surface(self, session_id: str) -> dict[str, Any]:
        return dict(self._route("read_surface", {"sessionId": session_id}))

    def read_event(self, request: dict[str, Any]) -> dict[str, Any]:
        return dict(self._route("read_event", dict(request)))

    def read_transcript(self, request: dict[str, Any]) -> dict[str, Any]:
        return dict(self._route("read_transcript", dict(request)))

    def trace_event(self, session_id: str, seq: int) -> dict[str, Any]:
        return dict(self._route("trace_event", {"sessionId": session_id, "seq": seq}))

    def filter_events(self, session_id: str, filters: Any) -> dict[str, Any]:
        return dict(self._route("filter_events", {"sessionId": session_id, "filters": filters}))

    def index_digest(self) -> dict[str, Any]:
        parts = self.scatter("shard.digest", {})
        return combine_digests((p["sessions"] for p in parts),
                               merge_coverage(p["substring"] for p in parts))

    def substring_index(self) -> dict[str, Any]:
        """`{built: all|none|partial, lacking}` over every shard owner (QueryService's shape)."""
        parts = self.scatter("shard.substring_state", {})
        lacking = [k for k, part in enumerate(parts) if not part["built"]]
        built = "all" if not lacking else "none" if len(lacking) == len(parts) else "partial"
        return {"built": built, "lacking": lacking}

    def build_substring_index(self) -> dict[str, Any]:
        """Every shard owner builds its shard's substring index (the explicit step; a shard
        that has it adds nothing). A shard that fails fails the whole request: its owner's
        code, not a partial success."""
        parts = self.scatter("shard.substring_build", {})
        return {"documentsAdded": sum(int(part["documentsAdded"]) for part in parts)}

    def close(self) -> None:
        """Nothing to release: the transport belongs to the worker."""


class CoordinatorBackend:
    """Backend shape for `dispatch` on a coordinator: remote reads, references appended by
    producing to `<p>.events`."""

    def __init__(self, remote: RemoteQuery | WorkspaceQuery,
                 append: Callable[[str, Sequence[Mapping[str, Any]]], list[int]],
                 generation: str = "gen-000001") -> None:
        self._query = remote
        self._generation = generation
        settings = remote.settings
        self._reference = ReferenceService(
            remote, append, max_references=settings.max_references,
            max_reference_bytes=settings.max_reference_bytes,
            candidate_limit=settings.candidate_limit)

    def query(self) -> RemoteQuery | WorkspaceQuery:
        return self._query

    def reference(self) -> ReferenceService:
        return self._reference

    def generation(self) -> str:
        """The live generation this coordinator scatters to."""
        return self._generation


def run_sync(loop: asyncio.AbstractEventLoop, coro: Any, timeout: float) -> Any:
    """Block a worker thread on a coroutine scheduled on `loop`."""
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)
