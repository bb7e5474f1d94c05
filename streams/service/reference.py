"""Reference stage, runtime side: read sources at one captured seq, build the frozen snapshot and
append `[context, readable]` to the target as two plain `user/message` appends (PROTOCOL §4.7, our order)
when recall writes the target; for a target someone else writes (an agent's file, an outside
producer) the two messages are returned for that writer to deliver (`delivery: "returned"`).
This service is shared by the embedded runtime and the Kafka query worker, so neither ever
appends to a session it does not write.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from projections.errors import SessionQueryError, SessionReferenceError
from projections.mentions import format_mention, parse_mentions
from projections.snapshot import (
    READ_FAILED,
    build_context_message,
    build_source_snapshot,
    normalize_references,
    validate_candidate_limit,
    validate_reference_config,
)
from streams.service.owned import appended_events, require_writer, writes

#: Appends events to a session: (session id, events without seq/time) → their seqs.
Appender = Callable[[str, Sequence[Mapping[str, Any]]], list[int]]


def _text_content(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = args.get("content")
    if content is None:
        message = args.get("message")
        if not isinstance(message, str):
            raise SessionReferenceError("give `message` (text) or `content` (blocks)",
                                        code="SESSION_REFERENCE_INVALID_REFERENCE")
        return [{"type": "text", "text": message}]
    if not isinstance(content, list):
        raise SessionReferenceError("content must be a list of blocks",
                                    code="SESSION_REFERENCE_INVALID_REFERENCE")
    return copy.deepcopy(content)


def rewrite_mentions(content: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Replace mentions in text blocks only (other blocks kept); returns the found references."""
    found: list[Any] = []
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(
                block.get("text"), str):
            text, refs = parse_mentions(block["text"])
            found.extend(refs)
            out.append({**block, "text": text})
        else:
            out.append(block)
    return out, found


_ENVELOPE = ("type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable")


def number_events(base: int, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Give appended events their seqs, continuing a log that holds `base` events (envelope
    keys in PROTOCOL §1.2 order, so the stored line is the same whoever appended it)."""
    out = []
    for i, event in enumerate(events):
        numbered = {**event, "seq": base + i}
        out.append({k: numbered[k] for k in _ENVELOPE if k in numbered})
    return out


class ReferenceService:
    """`prepare` (PROTOCOL §4.2) and `candidates` (PROTOCOL §4.1) over a query service and an appender."""

    def __init__(self, query: Any, append: Appender | None, *, max_references: int,
                 max_reference_bytes: int, candidate_limit: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.query = query
        self.append = append
        self.max_references = max_references
        self.max_reference_bytes = max_reference_bytes
        self.candidate_limit = candidate_limit
        self.clock = clock

    def prepare(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`{content, additionalContext?, messages, delivery, appended?}`; nothing is appended
        unless every source was read and fits its budget (no partial context, ever), and only
        to a target recall writes: otherwise `delivery` is `returned` and `messages` holds
        `[context, readable]` for the target's own writer to deliver."""
        validate_reference_config(self.max_references, self.max_reference_bytes)
        target = args.get("targetSessionId")
        if not isinstance(target, str):
            raise SessionReferenceError("targetSessionId must be a string",
                                        code="SESSION_REFERENCE_INVALID_REFERENCE")
        content, mentioned = rewrite_mentions(_text_content(args))
        explicit = args.get("references") or []
        references = normalize_references(target, [*explicit, *mentioned], self.max_references)
        header = self._target_header(target)  # the target must exist before anything is read
        result: dict[str, Any] = {"content": content}
        message_id = args.get("messageId") or f"msg-{uuid.uuid4()}"
        readable = {"id": message_id, "role": "user", "source": {"kind": "user"},
                    "content": content}
        messages: list[dict[str, Any]] = []
        if references:
            sources_data, provenance = [], []
            for index, ref in enumerate(references):
                try:
                    surface = self.query.read_surface(ref.session_id)
                except SessionQueryError as exc:
                    raise SessionReferenceError(
                        f"cannot read source session {ref.session_id!r}: {exc.code}",
                        code=READ_FAILED, cause=exc) from exc
                data, prov = build_source_snapshot(
                    surface["session"], surface["events"], surface["capturedThroughSeq"],
                    ref.label, self.max_reference_bytes, index)
                sources_data.append(data)
                provenance.append(prov)
            context = build_context_message(sources_data, provenance, f"{message_id}:context")
            result["additionalContext"] = context
            messages.append(context)
        messages.append(readable)
        result["messages"] = messages
        result["delivery"] = "returned"
        if not args.get("dryRun") and writes(header):
            if self.append is None:
                raise SessionReferenceError("this runtime cannot append to sessions",
                                            code="SESSION_REFERENCE_INVALID_CONFIG")
            now = int(self.clock() * 1000)
            events = [{"type": "user/message", "time": now, "data": m, "surfaceOp": "append"}
                      for m in messages]
            result["appended"] = self.append(target, events)
            result["delivery"] = "appended"
        return result

    def append_events(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`{sessionId, seqs}`: append events to a session recall writes (RECALL_NOT_WRITER for
        any other); the appender numbers them after the log's last seq."""
        target = args.get("sessionId")
        events = args.get("events")
        if not isinstance(target, str) or not isinstance(events, list):
            raise SessionQueryError("append_events needs a sessionId and a list of events",
                                    code="SESSION_QUERY_INVALID_FILTER")
        require_writer(self._target_header(target))
        prepared = appended_events(events, int(self.clock() * 1000))
        if not prepared:
            return {"sessionId": target, "seqs": []}
        if self.append is None:
            raise SessionReferenceError("this runtime cannot append to sessions",
                                        code="SESSION_REFERENCE_INVALID_CONFIG")
        return {"sessionId": target, "seqs": self.append(target, prepared)}

    def candidates(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Sessions one may reference from `targetSessionId`: same cwd first, then cwd-less,
        then others; ties keep the listing order (newest first)."""
        target = args.get("targetSessionId")
        if not isinstance(target, str):
            raise SessionReferenceError("targetSessionId must be a string",
                                        code="SESSION_REFERENCE_INVALID_REFERENCE")
        limit = validate_candidate_limit(args.get("limit", self.candidate_limit))
        query = args.get("query") or ""
        if not isinstance(query, str):
            raise SessionReferenceError("query must be a string",
                                        code="SESSION_REFERENCE_INVALID_REFERENCE")
        target_cwd = self._target_header(target).get("cwd")

        def rank(header: Mapping[str, Any]) -> int:
            cwd = header.get("cwd")
            if cwd is not None and target_cwd is not None and cwd == target_cwd:
                return 0
            return 1 if cwd is None else 2

        if query:
            listing = self._headers(None, None, target)
            ordered = sorted(listing, key=rank)  # stable: listing order breaks ties
        else:
            ordered = self._first_candidates(target, target_cwd, limit, rank)
        rows = []
        for header in ordered:
            label = self._label(str(header["id"]))
            row = {"sessionId": header["id"], "label": label, "createdAt": header["createdAt"]}
            if header.get("cwd") is not None:
                row["cwd"] = header["cwd"]
            row["mention"] = format_mention(label, str(header["id"]))
            rows.append(row)
        if query:
            needle = query.lower()
            rows = [r for r in rows if needle in str(r["sessionId"]).lower()
                    or needle in str(r.get("cwd", "")).lower() or needle in r["label"].lower()]
        return rows[:limit]

    def _headers(self, cwd: Any, limit: int | None, target: str) -> list[dict[str, Any]]:
        """Listing headers but the target's: all (`cwd` None) or those of one cwd, at most `limit`
        of them before the target is left out."""
        records = (self.query.list_sessions(limit=limit) if cwd is None
                   else self.query.filter_sessions([{"kind": "cwd", "values": [cwd]}],
                                                   limit=limit))
        return [r["header"] for r in records if r["header"]["id"] != target]

    def _first_candidates(self, target: str, target_cwd: Any, limit: int,
                          rank: Callable[[Mapping[str, Any]], int]) -> list[dict[str, Any]]:
        """The first `limit` of the listing ordered by `rank`, reading only that many sessions
        of each rank: the same cwd's and the cwd-less first (each by a limited filter); the
        others from the listing's head, which holds enough of them once those two came short."""
        same = (self._headers(target_cwd, limit + 1, target)[:limit]
                if target_cwd is not None else [])
        cwdless = self._headers_without_cwd(limit + 1, target)[:limit]
        if len(same) + len(cwdless) >= limit:
            return [*same, *cwdless][:limit]
        head = self._headers(None, limit + len(same) + len(cwdless) + 1, target)
        others = [h for h in head if rank(h) == 2]
        return [*same, *cwdless, *others][:limit]

    def _headers_without_cwd(self, limit: int, target: str) -> list[dict[str, Any]]:
        records = self.query.filter_sessions([{"kind": "cwd", "values": [None]}], limit=limit)
        return [r["header"] for r in records if r["header"]["id"] != target]

    def _target_header(self, session_id: str) -> dict[str, Any]:
        """The target's header alone (a listing filter), without reading its whole log."""
        found = self.query.filter_sessions([{"kind": "id", "values": [session_id]}])
        if not found:
            raise SessionQueryError(f"session {session_id!r} not found",
                                    code="SESSION_QUERY_SESSION_NOT_FOUND")
        header: dict[str, Any] = found[0]["header"]
        return header

    def _label(self, session_id: str) -> str:
        """The latest `session/title`, else the id (also when the title cannot be read)."""
        try:
            page = self.query.filter_events(session_id, [{"kind": "type",
                                                          "values": ["session/title"]}])
        except SessionQueryError:
            return session_id
        for entry in reversed(page["events"]):
            data = entry["event"].get("data")
            if isinstance(data, dict) and isinstance(data.get("title"), str) and data["title"]:
                return str(data["title"])
        return session_id
