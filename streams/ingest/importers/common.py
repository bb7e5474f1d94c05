"""Ingest edge: the importers' shared result type, source-line reader and fold-checked event emitter."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

from projections.codec import JSONDecodeError, dumps, loads, loads_lossless
from projections.errors import (
    INGEST_MALFORMED_JSON,
    INGEST_SCHEMA_VIOLATION,
    InputRejected,
)
from projections.events import KNOWN_EVENT_TYPES, MAX_SAFE_INTEGER, SURFACE_TYPES, parse_event
from projections.logformat import LogBuilder, Rejection, split_lines
from streams.ingest.importers.turns import TurnClock


class ImportedSession(NamedTuple):
    """One native session made from a foreign file: header, events (seq from 0), parked lines.

    A NamedTuple so the ingest edge can unpack it as `(header, events, rejections)`."""

    header: dict[str, Any]
    events: list[dict[str, Any]]
    rejections: list[Rejection]


class SourceLine(NamedTuple):
    """One parsed line of a foreign file: 1-based line number, original bytes, decoded object.
    A NamedTuple (made once per record of every file): cheaper to build than a frozen dataclass."""

    number: int
    raw: bytes
    value: dict[str, Any]


def read_objects(data: bytes) -> Iterator[SourceLine | Rejection]:
    """Each non-blank line as a SourceLine holding a JSON object, or a Rejection (read as the
    native log is, by the codec's lossless reader: same codes for the same faults)."""
    last = data.count(b"\n") + 1
    truncated = not data.endswith(b"\n")
    for number, line in split_lines(data):
        try:
            value = loads_lossless(line)
        except InputRejected as exc:
            reason = exc.message
            if exc.code == INGEST_MALFORMED_JSON and truncated and number == last:
                # A writer that is still appending leaves a partial last line; say so, it may heal.
                reason = f"truncated last line ({reason})"
            yield Rejection(number, exc.code, reason, line)
            continue
        if not isinstance(value, dict):
            yield Rejection(number, INGEST_SCHEMA_VIOLATION, "record is not a JSON object", line)
            continue
        yield SourceLine(number, line, value)


def read_lines(data: bytes) -> Iterator[SourceLine | Rejection]:
    """Each non-blank line as a SourceLine, or a Rejection when it is not a JSON object with a
    non-empty string `type`."""
    for item in read_objects(data):
        if isinstance(item, SourceLine) and (not isinstance(item.value.get("type"), str)
                                             or not item.value["type"]):
            yield Rejection(item.number, INGEST_SCHEMA_VIOLATION,
                            "record is not a JSON object with a non-empty string `type`",
                            item.raw)
            continue
        yield item


def split_readable(items: Iterable[SourceLine | Rejection]) -> tuple[list[SourceLine],
                                                                      list[Rejection]]:
    """Separate the readable records from the lines that were rejected on reading."""
    lines: list[SourceLine] = []
    rejected: list[Rejection] = []
    for item in items:
        if isinstance(item, Rejection):
            rejected.append(item)
        else:
            lines.append(item)
    return lines, rejected


def load_document(data: bytes, prefix: str, source_name: str) -> dict[str, Any] | ImportedSession:
    """A whole-document format's JSON object, or (when the bytes are not one) a placeholder
    session parking the whole file: it may be mid-rewrite, and heals on the next import."""
    found: dict[str, Any] | ImportedSession = _load_whole(data, prefix, source_name, dict,
                                                          "object")
    return found


def load_records(data: bytes, prefix: str,
                 source_name: str) -> tuple[list[SourceLine], list[Rejection]] | ImportedSession:
    """A document that is a JSON array of records (Roo Code, OpenHands): its readable records
    numbered by position, and those that are not objects; or, when the bytes are not such an
    array, a placeholder session parking the whole file (it may be mid-rewrite)."""
    value = _load_whole(data, prefix, source_name, list, "array")
    if isinstance(value, ImportedSession):
        return value
    return split_readable(part_line(i + 1, v) for i, v in enumerate(value))


def _load_whole(data: bytes, prefix: str, source_name: str, kind: type,
                name: str) -> Any:
    """The document's JSON value of type `kind`, or a placeholder session parking the file."""
    try:
        value = loads(data)
    except JSONDecodeError as exc:
        return orphan_session(prefix, source_name, [Rejection(
            0, INGEST_MALFORMED_JSON, f"the document does not parse (it may be mid-write): {exc}",
            data)])
    if not isinstance(value, kind):
        return orphan_session(prefix, source_name, [Rejection(
            0, INGEST_SCHEMA_VIOLATION, f"the document is not a JSON {name}", data)])
    return value


def part_line(number: int, value: Any) -> SourceLine | Rejection:
    """One record of a whole document (a message) as a SourceLine numbered by its position; its
    `raw` is its exact JSON value (a pretty-printed document has no per-record bytes)."""
    raw = dumps(value)
    if not isinstance(value, dict):
        return Rejection(number, INGEST_SCHEMA_VIOLATION, "record is not a JSON object", raw)
    return SourceLine(number, raw, value)


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (type-confused fields read as absent)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def iso_ms(value: Any) -> int | None:
    """ISO-8601 timestamp → epoch ms (naive means UTC); None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    # Integer arithmetic on the timedelta: float timestamps can be off by one millisecond.
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000)


def make_header(session_id: str, created_at: int, *, cwd: Any = None,
                parent: str | None = None, depth: int = 0) -> dict[str, Any]:
    """A native header (PROTOCOL §1.1); a cwd that is not absolute is left out, not rejected.
    `depth > 0` marks a subagent (`origin`); a parent at depth 0 is a fork's lineage."""
    header: dict[str, Any] = {"type": "session", "version": 0, "id": session_id,
                              "createdAt": max(created_at, 0)}
    if isinstance(cwd, str) and (cwd.startswith("/") or (len(cwd) >= 3 and cwd[1] == ":")):
        header["cwd"] = cwd
    if parent is not None:
        header["parentSession"] = parent
    if depth > 0:
        header["origin"] = "subagent"
    header["delegationDepth"] = depth
    return header


def orphan_session(prefix: str, source_name: str,
                   rejections: list[Rejection]) -> ImportedSession:
    """A header-only session that carries the rejections of a file where no session was found,
    so the ingest edge still parks them (they belong to no real session)."""
    digest = hashlib.blake2b(source_name.encode("utf-8"), digest_size=8).hexdigest()
    return ImportedSession(make_header(f"{prefix}:unidentified-{digest}", 0), [], rejections)


class Emitter:
    """Builds one session's events through `LogBuilder.feed_event`, so every emitted event has
    passed the same fold the store applies; an event that would break it is parked instead
    (plain appends, which cannot break it, skip it: see `__init__`)."""

    def __init__(self, *, plain_appends: bool = False) -> None:
        """`plain_appends`: the importer builds every event's data only from strings it
        decoded and integers it counts itself (no value parsed from JSON: Aider's Markdown), and
        every event only appends: a message with surfaceOp `append`, anything else with none, no
        sourceEventSeqs, its seq the next one. Such an event cannot fail the lossless walk (that
        looks for unsafe numbers) nor the fold, so both are skipped; the envelope's time is still
        checked, the append-only shape is enforced (anything else is a mapper bug: ValueError,
        so the record is parked), and the store's fold still checks every event at ingest
        (`streams/ingest/edge.py`)."""
        self._builder = LogBuilder(keep_steps=False)  # importers hand on only the events
        self._plain_appends = plain_appends
        self.rejections: list[Rejection] = []
        self._line_with_raw: int | None = None
        self.last_time = 0

    @property
    def events(self) -> list[dict[str, Any]]:
        return self._builder.log.events

    @property
    def kept_line(self) -> int | None:
        """The number of the last source record whose original is in the log."""
        return self._line_with_raw

    @property
    def next_seq(self) -> int:
        log = self._builder.log
        return len(log.events) if self._plain_appends else log.state.next_seq

    def nodes(self) -> list[int]:
        """The current surface, in model order."""
        if self._plain_appends:  # appends only: the surface is every message, in log order
            return [e["seq"] for e in self._builder.log.events if e["type"] in SURFACE_TYPES]
        return self._builder.log.state.nodes

    def emit(self, line: SourceLine, kind: str, time: int, data: dict[str, Any], *,
             op: Any = None, sources: list[int] | None = None,
             with_raw: bool = True, key: str | None = None) -> int | None:
        """Append one event; return its seq, or None when it was parked as a rejection.

        The first event made from a source line carries the original record as `data.raw`
        (`with_raw=False` for rewrites whose data must stay equal to what they replace).
        `key` names the piece of a whole document the event came from (`data.sourceKey`)."""
        if key is not None:
            data = {**data, "sourceKey": key}
        if with_raw and self._line_with_raw != line.number:
            data = {**data, "raw": line.value}
        log = self._builder.log
        plain = self._plain_appends
        seq = len(log.events) if plain else log.state.next_seq
        event: dict[str, Any] = {"type": kind, "seq": seq, "time": time, "data": data}
        if op is not None:
            event["surfaceOp"] = op
        if sources is not None:
            event["sourceEventSeqs"] = sources
        if kind not in KNOWN_EVENT_TYPES:
            event["ignorable"] = True
        try:
            if plain:  # see __init__
                if sources is not None or op != ("append" if kind in SURFACE_TYPES else None):
                    raise ValueError(f"{kind} at seq {seq} is not a plain append")
                if type(time) is not int or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER \
                        or not kind:
                    parse_event(event)  # the envelope's own rejection
                log.events.append(event)
            else:
                self._builder.feed_event(parse_event(event))
        except InputRejected as exc:
            self.reject(line, exc.code, f"{kind}: {exc.message}")
            return None
        if with_raw:
            self._line_with_raw = line.number
        self.last_time = time
        return seq

    def reject(self, line: SourceLine, code: str, reason: str) -> None:
        self.rejections.append(Rejection(line.number, code, reason, line.raw))

    def open_step(self, line: SourceLine, clock: TurnClock, time: int, *,
                  keyed: bool = False) -> None:
        """`step/start {turn, step}` when the clock says a new step begins (PROTOCOL §6.2's clamp
        needs one per step); it never takes the record's `raw`, the message after it does."""
        due = clock.open_step()
        if due is not None:
            self.emit(line, "step/start", time, {"turn": due[0], "step": due[1]}, with_raw=False,
                      key=f"step:{due[0]}:{due[1]}" if keyed else None)


def with_rejections(prefix: str, sessions: list[ImportedSession], unreadable: list[Rejection],
                    source_name: str) -> list[ImportedSession]:
    """File-level rejections go on the file's first session, or on a placeholder when the file
    has none yet."""
    if not unreadable:
        return sessions
    unreadable = sorted(unreadable, key=lambda r: r.line)
    if not sessions:
        return [orphan_session(prefix, source_name, unreadable)]
    first = sessions[0]
    merged = sorted([*first.rejections, *unreadable], key=lambda r: r.line)
    return [ImportedSession(first.header, first.events, merged), *sessions[1:]]


def feed_each(lines: Iterable[SourceLine], feed: Callable[[SourceLine], None],
              emitter: Emitter, unmapped: str) -> None:
    """Map records one by one; a record whose fields have unexpected types (a list where a
    string belongs, a missing key) is parked whole with INGEST_SCHEMA_VIOLATION and the rest of
    the file still imports. Events it produced before failing stay (they passed the fold).
    A record that produced nothing and was not parked (an empty message, say) is kept as a
    log-only `unmapped` event, so every record is either in the log or in the dead letters."""
    rejections = emitter.rejections
    for line in lines:
        parked = len(rejections)
        try:
            feed(line)
        except Exception as exc:  # one bad record must never stop the file
            emitter.reject(line, INGEST_SCHEMA_VIOLATION, shape_error(exc))
        # the attribute behind `kept_line` (a property call per record costs a Python frame)
        if emitter._line_with_raw != line.number and len(rejections) == parked:
            emitter.emit(line, unmapped, emitter.last_time, {})


def shape_error(exc: BaseException) -> str:
    """The reason text of a record the mapper could not read (bounded: it goes to dead letters)."""
    detail = str(exc)
    if len(detail) > 200:
        detail = detail[:200] + "…"
    return f"record has an unexpected shape ({type(exc).__name__}: {detail})"


class LineMapper:
    """A session mapper's shared state: its emitter and the current record's time."""

    em: Emitter
    time: int

    def _log_only(self, line: SourceLine, kind: str, data: dict[str, Any]) -> int | None:
        """A log-only event (no surface change) at the current record's time."""
        return self.em.emit(line, kind, self.time, data)
