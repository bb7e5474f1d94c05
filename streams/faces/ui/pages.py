"""Presentation edge for people: what each page of `recall ui` shows, as plain data.

Pure functions from the facade's answers (the protocol's JSON) to the values templates render. Untrusted
text leaves here as plain strings with layout-changing characters made visible (`\\u202e`, …);
the templates' autoescaping turns them into inert HTML. Highlights are segments, never markup.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from projections.calls import blocks, call_ids, own_words, result_call_id, tool_names
from projections.codec import JSONDecodeError, dumps, dumps_pretty, loads
from projections.extraction import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, extract_text
from projections.fold import fold_surface
from projections.surfaces import surfaces_from_fold
from projections.titles import NOT_INJECTED, SOURCE_NAMES, source_code
from streams.facade import SearchOptions, mark_queries
from streams.faces.textsafe import visible
from streams.faces.views import call_layout, role_of, without_raw

#: Events shown on one page of the sessions list.
SESSIONS_PAGE = 25
#: Search hits per page (the query API's default limit).
SEARCH_PAGE = 20
#: Entries per page of a session's transcript: a 50k-event session stays a page a browser can
#: render; `at=SEQ` opens the page holding that event.
TRANSCRIPT_PAGE = 400
#: Neighbours shown either side of an event on its page.
NEIGHBOURS = 3
#: Sessions one reference may pull in (the preview's form; PROTOCOL §4 allows the configured max).
REFERENCE_SOURCES = 3

_COMPACTION_MARKERS = frozenset({"compaction/start", "compaction/summary", "compaction/end",
                                 "compaction/prune"})
_TOOL_TYPES = frozenset({"tool/call", "tool/result"})


def ms_to_text(ms: Any) -> str:
    """A time to the second, UTC; `-` when unknown."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return "-"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def line(text: Any) -> str:
    """Untrusted text on one line, layout-changing characters shown as escapes."""
    return visible(" ".join(str(text).split())) if text is not None else ""


def body(text: Any) -> str:
    """Untrusted multi-line text: line breaks kept, every other control shown as an escape."""
    return visible(str(text), keep_newlines=True) if text is not None else ""


def mark_query(snippet: str, query: str, *, substring: bool = False) -> str:
    return mark_queries([snippet], query, substring=substring)[0]


def segments(snippet: str) -> list[tuple[str, bool]]:
    """A snippet's text split at the indexer's highlight markers (U+FDD0 … U+FDD1) into
    `(text, highlighted)` pieces, each made visible; the template wraps the highlighted ones
    in <mark>. Unbalanced markers (a snippet cut inside a match) close at the end."""
    out: list[tuple[str, bool]] = []
    marked = False
    piece: list[str] = []

    def flush() -> None:
        if piece:
            out.append((visible("".join(piece)), marked))
            piece.clear()

    for char in snippet:
        if char in (HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE):
            flush()
            marked = char == HIGHLIGHT_OPEN
        else:
            piece.append(char)
    flush()
    return [(text, hit) for text, hit in out if text]


# --- sessions -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SessionRow:
    """One line of the sessions list."""

    id: str
    title: str
    agent: str
    cwd: str
    first: str
    last: str
    events: int
    live: bool


def session_row(record: Mapping[str, Any]) -> SessionRow:
    header = record.get("header") or {}
    title = record.get("title")
    return SessionRow(id=str(header.get("id")),
                      title=line(title) if isinstance(title, str) and title.strip()
                      else "untitled",
                      agent=line(record.get("agent") or "-"), cwd=line(header.get("cwd") or "-"),
                      first=ms_to_text(record.get("firstEventTime")),
                      last=ms_to_text(record.get("lastEventTime")),
                      events=int(record.get("eventCount") or 0), live=bool(record.get("live")))


# --- a session's transcript ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Entry:
    """One event of a transcript, as a person reads it."""

    seq: int
    type: str
    role: str
    time: str
    surface: str
    text: str
    kind: str  # message | injected | thinking | tool | boundary | marker | other
    replaced_by: int | None = None
    replaced_how: str = ""
    replaces: str = ""
    tool_name: str = ""


def _replacement_kind(event: Mapping[str, Any] | None) -> str:
    """How a replacing event came to be: a compaction summary, or a pruned copy."""
    if event is None:
        return "replacement"
    role = role_of(event)
    if role == "compaction summary":
        return "compaction"
    if event.get("type") == "tool/result":
        return "prune"
    return "replacement"


def _thinking(event: Mapping[str, Any]) -> str:
    """The reasoning a message carries (shown collapsed when it is all the message holds)."""
    return "\n\n".join(str(b.get("text") or "") for b in blocks(event)
                       if isinstance(b, dict) and b.get("type") == "reasoning").strip()


def _injected(event: Mapping[str, Any]) -> bool:
    """A user message a plugin, the harness or a reference put in: collapsed like tool output."""
    return SOURCE_NAMES.get(source_code(event)) not in NOT_INJECTED


def _preview(event: Mapping[str, Any]) -> str:
    data = without_raw(event).get("data")
    if data in (None, {}, []):
        return ""
    text = dumps(data).decode("utf-8")
    return text if len(text) <= 400 else text[:399] + "…"


def transcript(events: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """The human transcript (PROTOCOL §5.1): every append-origin event in log order with its surface
    and, when shadowed, what replaced it; replacing events (compaction summaries, pruned
    copies) and compaction markers as boundaries; other events that carry text as log-only."""
    if not events:
        return []
    base = int(events[0]["seq"])
    fold = fold_surface(list(events), base_seq=base)
    surfaces = surfaces_from_fold(len(events), fold, base_seq=base)
    replacer_of: dict[int, int] = {}
    for rep in fold.replacements:
        for seq in rep.shadowed_seqs:
            replacer_of[seq] = rep.seq
    by_seq = {int(e["seq"]): e for e in events}
    names = tool_names(events)
    out: list[Entry] = []
    for event, surface in zip(events, surfaces, strict=True):
        replaced_by = replacer_of.get(int(event["seq"]))
        entry = transcript_entry(event, surface.value, replaced_by,
                                 None if replaced_by is None else by_seq.get(replaced_by), names)
        if entry is not None:
            out.append(entry)
    return out


def transcript_page(answer: Mapping[str, Any]) -> list[Entry]:
    """The entries of a `read_transcript` answer's page: what `transcript` gives for the same
    events of the whole log."""
    replacers = {int(e["seq"]): e for e in answer.get("replacers") or []}
    names = dict(answer.get("names") or {})
    out: list[Entry] = []
    for item in answer.get("entries") or []:
        replaced_by = item.get("replacedBy")
        entry = transcript_entry(item["event"], str(item["surface"]), replaced_by,
                                 None if replaced_by is None else replacers.get(replaced_by),
                                 names)
        if entry is not None:
            out.append(entry)
    return out


def transcript_entry(event: Mapping[str, Any], surface: str, replaced_by: int | None,
                     replacer: Mapping[str, Any] | None,
                     names: Mapping[str, str]) -> Entry | None:
    """One event's entry (None when the transcript leaves it out): `replaced_by` is the
    replacement that shadowed it and `replacer` that event, `names` the tool names by call id
    (at least of the calls this event makes or answers)."""
    seq, kind_name = int(event["seq"]), str(event.get("type"))
    op = event.get("surfaceOp")
    text = extract_text(event)
    calls = call_ids(event) if kind_name == "assistant/message" else []
    if calls and all(c in names for c in calls):
        # Each call has its own tool/call entry: the message keeps only its own words, so a
        # call shows once (as `recall events` shows it).
        text = own_words(event)
        if not text.strip() and replaced_by is None:
            return None
    how = _replacement_kind(replacer) if replaced_by is not None else ""
    common: dict[str, Any] = {"seq": seq, "type": line(kind_name), "role": role_of(event),
                              "time": ms_to_text(event.get("time")),
                              "surface": surface, "replaced_by": replaced_by,
                              "replaced_how": how}
    if isinstance(op, dict) and op.get("op") == "replace":
        start, end = op.get("start"), op.get("end")
        span = f"seq {start}" if start == end else f"seqs {start}–{end}"
        return Entry(**common, text=body(text), kind="boundary",
                     replaces=f"{_replacement_kind(event)}: replaces {span}")
    if kind_name in _COMPACTION_MARKERS:
        return Entry(**common, text=body(text or _preview(event)), kind="marker")
    if kind_name in _TOOL_TYPES and (op == "append" or text):
        name = str((event.get("data") or {}).get("name") or "") if kind_name == "tool/call" \
            else names.get(result_call_id(event) or "", "")
        laid_out = call_layout(event) if kind_name == "tool/call" else None
        return Entry(**common, text=body(text if laid_out is None else laid_out),
                     kind="tool", tool_name=line(name))
    if op == "append" and not text.strip() and _thinking(event):
        return Entry(**common, text=body(_thinking(event)), kind="thinking")
    if op == "append" and _injected(event):
        return Entry(**common, text=body(text), kind="injected")
    if op == "append" or text:
        return Entry(**common, text=body(text) or ("(no text)" if op == "append" else ""),
                     kind="message" if op == "append" else "other")
    return None


def surface_counts(entries: Sequence[Entry]) -> dict[str, int]:
    """Entries per surface, for the page's summary line."""
    return {s: sum(1 for e in entries if e.surface == s) for s in ("current", "shadowed", "log-only")}


def surface_entries(surface: Mapping[str, Any]) -> list[Entry]:
    """`read_surface`'s events in model order: exactly what the session's model sees now."""
    out = []
    for event in surface.get("events") or []:
        kind_name = str(event.get("type"))
        out.append(Entry(seq=int(event["seq"]), type=line(kind_name), role=role_of(event),
                         time=ms_to_text(event.get("time")), surface="current",
                         text=body(extract_text(event)),
                         kind="tool" if kind_name in _TOOL_TYPES else "message"))
    return out


@dataclass(frozen=True, slots=True)
class Lineage:
    """A session's ancestors (nearest first) and descendants (depth-first, with depth)."""

    ancestors: list[str] = field(default_factory=list)
    descendants: list[tuple[int, str]] = field(default_factory=list)
    unresolved_parent: str | None = None


def lineage(trace: Mapping[str, Any]) -> Lineage:
    ancestors = [str(h.get("id")) for h in trace.get("ancestors") or []]
    flat: list[tuple[int, str]] = []
    stack: list[tuple[int, Mapping[str, Any]]] = [
        (0, n) for n in reversed(trace.get("descendants") or [])]
    while stack:
        depth, node = stack.pop()
        flat.append((depth, str((node.get("header") or {}).get("id"))))
        stack.extend((depth + 1, child) for child in reversed(node.get("children") or []))
    unresolved = None if trace.get("complete", True) else str(trace.get("unresolvedParentId"))
    return Lineage(ancestors, flat, unresolved)


# --- search -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SearchForm:
    """The search page's inputs, as typed (every value a string or a list of strings)."""

    query: str = ""
    session: str = ""
    surfaces: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    cwd: str = ""
    agent: str = ""
    since: str = ""
    until: str = ""
    no_injected: bool = False
    substring: bool = False
    semantic: bool = False  # by meaning too: hybrid ranking (docs/semantic.md)
    cursor: str = ""

    def link_args(self) -> list[tuple[str, str]]:
        """The form's values as query arguments (for the next-page link), cursor left out."""
        args = [("q", self.query)]
        args += [(k, v) for k, v in (("session", self.session), ("cwd", self.cwd),
                                     ("agent", self.agent), ("since", self.since),
                                     ("until", self.until)) if v]
        args += [("surface", s) for s in self.surfaces] + [("type", t) for t in self.types]
        args += [("no_injected", "1")] * self.no_injected + [("substring", "1")] * self.substring
        args += [("semantic", "1")] * self.semantic
        return args


def date_to_ms(value: str, *, end: bool = False) -> int:
    """An ISO date or date-time (UTC unless it says otherwise) as epoch ms; a bare date as
    `until` means the end of that day."""
    parsed = datetime.datetime.fromisoformat(value.strip())
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    if end and len(value.strip()) == 10:
        parsed += datetime.timedelta(days=1, milliseconds=-1)
    return int(parsed.timestamp() * 1000)


def search_options(form: SearchForm) -> SearchOptions:
    """The search the form asks for (a ValueError for a since/until that is not a date)."""
    return SearchOptions(
        query=form.query, session_id=form.session or None, surfaces=form.surfaces,
        types=form.types, no_injected=form.no_injected,
        time_from=date_to_ms(form.since) if form.since else None,
        time_to=date_to_ms(form.until, end=True) if form.until else None,
        cwd_trees=[form.cwd] if form.cwd else (), agents=[form.agent] if form.agent else (),
        limit=SEARCH_PAGE, cursor=form.cursor or None, substring=form.substring,
        mode="hybrid" if form.semantic else None)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search hit: where it is, on which surface, and its highlighted snippet."""

    session_id: str
    seq: int
    type: str
    time: str
    surface: str
    snippet: list[tuple[str, bool]]
    title: str = ""
    agent: str = ""
    cwd: str = ""


def session_hits(page: Mapping[str, Any], query: str = "", *,
                 substring: bool = False) -> list[Hit]:
    out = []
    items = page.get("items") or []
    marked = mark_queries([str((i.get("bestMatch") or {}).get("snippet") or "") for i in items],
                          query, substring=substring)
    for item, snippet in zip(items, marked, strict=True):
        best = item.get("bestMatch") or {}
        header = item.get("header") or {}
        title = item.get("title")
        out.append(Hit(session_id=str(best.get("sessionId")), seq=int(best.get("seq") or 0),
                       type=line(best.get("type")), time=ms_to_text(best.get("time")),
                       surface=str(best.get("surface")), snippet=segments(snippet),
                       title=line(title) if isinstance(title, str) and title.strip()
                       else "untitled",
                       agent=line(item.get("agent") or "-"), cwd=line(header.get("cwd") or "-")))
    return out


def event_hits(page: Mapping[str, Any], query: str = "", *,
               substring: bool = False) -> list[Hit]:
    items = page.get("items") or []
    marked = mark_queries([str(i.get("snippet") or "") for i in items], query,
                          substring=substring)
    return [Hit(session_id=str(item.get("sessionId")), seq=int(item.get("seq") or 0),
                type=line(item.get("type")), time=ms_to_text(item.get("time")),
                surface=str(item.get("surface")), snippet=segments(snippet))
            for item, snippet in zip(items, marked, strict=True)]


# --- an event -----------------------------------------------------------------------------------

def raw_json(value: Any) -> str:
    """An answer as indented JSON for the raw view (escaped by the template)."""
    return dumps_pretty(value)


def window(read: Mapping[str, Any]) -> list[tuple[Entry, bool]]:
    """`read_event`'s neighbours and target as entries; the flag marks the target."""
    def entry(item: Mapping[str, Any]) -> Entry:
        event = item["event"]
        text = item.get("text")
        return Entry(seq=int(event["seq"]), type=line(event.get("type")), role=role_of(event),
                     time=ms_to_text(event.get("time")), surface=str(item.get("surface")),
                     text=body(text if isinstance(text, str) else extract_text(event))
                     or body(_preview(event)), kind="message")
    return ([(entry(i), False) for i in read.get("before") or []] + [(entry(read["event"]), True)]
            + [(entry(i), False) for i in read.get("after") or []])


# --- reference preview --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SourceUse:
    """One referenced session in a preview: its bytes of the per-source budget, what was left
    out to fit."""

    session_id: str
    label: str
    bytes: int | None
    truncated: bool
    omitted_messages: int
    omitted_bytes: int
    retained_messages: int


_OPEN_TAG, _CLOSE_TAG = "<referenced-sessions>\n", "\n</referenced-sessions>"


def context_text(result: Mapping[str, Any]) -> str:
    """The wrapped context message's text, exactly as it would be delivered ('' without one)."""
    context = result.get("additionalContext")
    if not isinstance(context, dict):
        return ""
    return "".join(str(b.get("text", "")) for b in context.get("content") or []
                   if isinstance(b, dict) and b.get("type") == "text")


def source_uses(result: Mapping[str, Any]) -> list[SourceUse]:
    """Per source: the bytes its snapshot takes of the budget (PROTOCOL §4.5 measures each source's
    JSON object) and the truncation provenance records."""
    context = result.get("additionalContext") or {}
    provenance = ((context.get("source") or {}).get("references")) or []
    text = context_text(result)
    sizes: list[int | None] = [None] * len(provenance)
    start, end = text.find(_OPEN_TAG), text.rfind(_CLOSE_TAG)
    if 0 <= start < end:
        try:
            snapshots = loads(text[start + len(_OPEN_TAG):end])
        except JSONDecodeError:
            snapshots = None
        if isinstance(snapshots, list) and len(snapshots) == len(provenance):
            sizes = [len(dumps(s)) for s in snapshots]
    return [SourceUse(session_id=str(p.get("sessionId")), label=line(p.get("label")),
                      bytes=size, truncated=bool(p.get("truncated")),
                      omitted_messages=int(p.get("omittedMessages") or 0),
                      omitted_bytes=int(p.get("omittedBytes") or 0),
                      retained_messages=int(p.get("retainedMessages") or 0))
            for p, size in zip(provenance, sizes, strict=True)]


def writes(header: Mapping[str, Any] | None) -> bool:
    """Whether recall writes this session (one writer per session): only then may it append."""
    return isinstance(header, Mapping) and header.get("writer") == "recall"


# --- dead letters -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Parked:
    """One dead letter: where it came from, why, and its bytes with secrets redacted (the
    original stays in the store, for repair: `raw_url` downloads it)."""

    code: str
    reason: str
    source: str
    line_no: Any
    session_id: str
    at: str
    length: Any
    original: str
    raw_url: str


def parked(items: Iterable[Mapping[str, Any]], redact: Callable[[str], str]) -> list[Parked]:
    """The dead letters as shown: text redacted as the index would have it (a parked line
    never reached the redacting index, and may hold a secret)."""
    out = []
    for number, item in enumerate(items):
        try:
            raw = base64.b64decode(str(item.get("bytes") or ""), validate=True)
            original = raw.decode("utf-8", "backslashreplace")
        except ValueError:
            original = str(item.get("bytes") or "")
        out.append(Parked(code=line(item.get("code")), reason=line(redact(str(item.get("reason")
                                                                               or ""))),
                          source=line(item.get("source")), line_no=item.get("line"),
                          session_id=line(item.get("sessionId") or "-"),
                          at=ms_to_text(item.get("at")), length=item.get("length"),
                          original=body(redact(original)),
                          raw_url=f"/dead-letters/raw?n={number}" if item.get("bytes") else ""))
    return out


def page_of(entries: Sequence[Entry], page: int | None, at: int | None) -> tuple[int, int]:
    """(page, pages) for a transcript: the page holding the first entry at or after seq `at`
    when it is given (a link to an event in context), else `page`, clamped to the last page."""
    pages = max(1, -(-len(entries) // TRANSCRIPT_PAGE))
    if at is not None:
        index = next((i for i, e in enumerate(entries) if e.seq >= at), len(entries) - 1)
        return max(0, index) // TRANSCRIPT_PAGE + 1, pages
    return min(page or 1, pages), pages
