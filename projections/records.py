"""Stage 4 of the flow, streaming form: one event folded → the index records it produces.

Both runtimes run exactly this step (embedded: over the local store; Kafka: in the fold agent,
whose output goes to `<p>.documents`), so they write identical rows. A compaction that shadows N
events is one EventRecord carrying its Replacement, not N re-sent texts. Secrets are redacted here
(projections.redaction), before anything leaves the log: the record's text *and* raw event are
the redacted ones, so the index, the documents topic and every read made from them never hold
a secret; the store keeps the original.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from projections.codec import dumps, loads
from projections.events import SURFACE_TYPES
from projections.extraction import extract_text
from projections.fold import Replacement, Step, SurfaceState, plan
from projections.redaction import NO_REDACTION, Redactor
from projections.surfaces import Surface


# Records are NamedTuples, not frozen dataclasses: as immutable, and built much faster (a frozen
# dataclass's __init__ sets each field through object.__setattr__, and the fold builds an event
# record once per event, the index consumer decodes it once per event again).
class HeaderRecord(NamedTuple):
    """A session header (first record of a session); `header` is the wire dict."""

    session_id: str
    header: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "header", "sessionId": self.session_id, "header": dict(self.header)}


class EventRecord(NamedTuple):
    """One event as the index stores it. `surface` is its surface when it was appended (`current`
    for eligible events, `log-only` otherwise); `replacement` (if any) tells the indexer which
    earlier seqs this event shadowed — and its surface position is that of `replacement.start`."""

    session_id: str
    seq: int
    type: str
    time: int
    surface: Surface
    text: str
    raw: bytes
    replacement: Replacement | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "event", "sessionId": self.session_id, "seq": self.seq,
                "type": self.type, "time": self.time, "surface": self.surface.value,
                "text": self.text, "event": loads(self.raw),
                "replacement": None if self.replacement is None else self.replacement.to_json()}


IndexRecord = HeaderRecord | EventRecord


def event_record(session_id: str, event: Mapping[str, Any], step: Step, *,
                 redactor: Redactor = NO_REDACTION, raw: bytes | None = None) -> EventRecord:
    """The record of an event the fold has just accepted with `step`, redacted by `redactor`
    (the fold itself always runs on the original event: redaction never changes the surface).
    `raw`: the event's orjson serialization, if the caller has it (else it is dumped here)."""
    kind = str(event["type"])
    surface = Surface.CURRENT if kind in SURFACE_TYPES else Surface.LOG_ONLY
    if raw is None:
        raw = dumps(dict(event))
    shown, counts = redactor.redact_event(event, raw)
    if counts:
        raw = dumps(dict(shown))
    return EventRecord(session_id, int(event["seq"]), kind, int(event["time"]), surface,
                       extract_text(shown), raw, step.replacement)


def fold_records(session_id: str, state: SurfaceState, events: Sequence[Mapping[str, Any]], *,
                 redactor: Redactor = NO_REDACTION) -> tuple[SurfaceState, list[EventRecord]]:
    """Fold `events` onto `state`; return the new state and one record per event. Raises FoldError
    at the first invalid event and returns nothing then: callers needing partial progress go one
    event at a time."""
    records: list[EventRecord] = []
    for event in events:
        step = plan(state, event)
        state = step.state
        records.append(event_record(session_id, event, step, redactor=redactor))
    return state, records


def record_from_json(value: Mapping[str, Any]) -> IndexRecord:
    """Inverse of `to_json` (the documents topic carries this JSON)."""
    if value.get("kind") == "header":
        return HeaderRecord(str(value["sessionId"]), dict(value["header"]))
    rep = value.get("replacement")
    replacement = None if rep is None else Replacement.from_json(rep)
    return EventRecord(str(value["sessionId"]), int(value["seq"]), str(value["type"]),
                       int(value["time"]), Surface(value["surface"]), str(value["text"]),
                       dumps(value["event"]), replacement)
