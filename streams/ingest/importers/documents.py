"""Ingest edge: continue a session imported from a whole-document format (a JSON file the agent
rewrites whole) with what a new import of the document adds, without duplicates or losses.

A whole-document importer gives every event a `data.sourceKey` naming the piece of the document
it came from (a message, a tool call, a result, a title). Growth usually just extends the mapped
events; when it does not (a title that changed, tool calls that finished after later messages
were written), the events whose key was imported before are skipped and the rest are appended
in document order, their seq references renumbered to the continued log.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]


def source_key(event: Event) -> str | None:
    data = event.get("data")
    key = data.get("sourceKey") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def extend_events(stored: list[Event], fresh: list[Event]) -> list[Event]:
    """The events of `fresh` that `stored` lacks, with seqs continuing `stored`."""
    if fresh[:len(stored)] == stored:
        return fresh[len(stored):]
    known = {k: int(e["seq"]) for e in stored if (k := source_key(e)) is not None}
    seqs: dict[int, int] = {}
    added: list[Event] = []
    for event in fresh:
        key = source_key(event)
        if key is not None and key in known:
            seqs[int(event["seq"])] = known[key]
            continue
        seqs[int(event["seq"])] = len(stored) + len(added)
        added.append(_renumbered(event, seqs))
    return added


def _renumbered(event: Event, seqs: dict[int, int]) -> Event:
    def at(seq: Any) -> Any:
        return seqs.get(seq, seq) if isinstance(seq, int) else seq

    out = {**event, "seq": seqs[int(event["seq"])]}
    op = event.get("surfaceOp")
    if isinstance(op, dict):
        out["surfaceOp"] = {**op, "start": at(op.get("start")), "end": at(op.get("end"))}
    if isinstance(event.get("sourceEventSeqs"), list):
        out["sourceEventSeqs"] = [at(s) for s in event["sourceEventSeqs"]]
    data = event.get("data")
    if isinstance(data, dict) and ("shadowedSeqs" in data or "shadowedRange" in data):
        data = dict(data)
        if isinstance(data.get("shadowedSeqs"), list):
            data["shadowedSeqs"] = [at(s) for s in data["shadowedSeqs"]]
        span = data.get("shadowedRange")
        if isinstance(span, dict):
            data["shadowedRange"] = {**span, "start": at(span.get("start")),
                                     "end": at(span.get("end"))}
        out["data"] = data
    return out
