"""Presentation edge: how people read recall's answers — session listings, search hits, event
transcripts and lineage — as lines of rich `Text` (never markup; untrusted text escaped).

Every line is one record or one piece of one: the CLI prints them without hard wrapping, so a
piped listing has one session per line and full ids, and a terminal wraps long lines itself
(a copied cursor or id stays whole).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from projections.codec import dumps
from projections.extraction import extract_text, message_of
from streams.faces.textsafe import needs_escape, visible

# rich loads with the first line built: `recall search`'s fast path prints plain lines it builds
# from the same parts (session_hit_parts) and never imports it.
if TYPE_CHECKING:
    from rich.text import Text

DIM = "dim"
#: Characters of a structural event's data shown on its line.
DATA_PREVIEW_CHARS = 160


def ms_to_iso(ms: int) -> str:
    """A time to the millisecond (UTC), ISO 8601 as datetime writes it."""
    if type(ms) is int and 0 <= ms < _MS_END:
        # (datetime's own import costs a one-search process more than the page it prints)
        seconds, millis = divmod(ms, 1000)
        return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


_MINUTE = "%Y-%m-%d %H:%MZ"
#: 10000-01-01T00:00Z in ms: the first time datetime cannot show.
_MS_END = 253_402_300_800_000
#: Day number -> "YYYY-MM-DD ", minute of the day -> "HH:MMZ", as a listing meets them.
_DAYS: dict[int, str] = {}
_CLOCK: dict[int, str] = {}


def ms_to_minute(ms: int | None) -> str:
    """A time to the minute (UTC), for listings; `-` when unknown."""
    if ms is None:
        return "-"
    if type(ms) is int and 0 <= ms < _MS_END:
        # the same minute as datetime's (UTC days have 1440 minutes), made from kept parts: a
        # listing shows two per session
        day, minute = divmod(ms // 60_000, 1_440)
        date = _DAYS.get(day)
        if date is None:
            date = _DAYS[day] = time.strftime("%Y-%m-%d ", time.gmtime(day * 86_400))
        clock = _CLOCK.get(minute)
        if clock is None:
            clock = _CLOCK[minute] = f"{minute // 60:02d}:{minute % 60:02d}Z"
        return date + clock
    import datetime  # (only a time past the kept parts' range)

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime(_MINUTE)


def one_line(text: object) -> str:
    """Untrusted text on one line: whitespace runs collapsed, the rest escaped."""
    return visible(" ".join(str(text).split()))


def title_of(record: Mapping[str, Any]) -> str:
    title = record.get("title")
    return one_line(title) if isinstance(title, str) and title.strip() else "untitled"


# --- data.raw -----------------------------------------------------------------------------------

def without_raw(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event without `data.raw` (the original agent record an importer kept): it is often
    most of an event's bytes and little of its meaning."""
    out = dict(event)
    data = out.get("data")
    if isinstance(data, dict) and "raw" in data:
        out["data"] = {k: v for k, v in data.items() if k != "raw"}
    return out


def strip_raw(value: Any) -> Any:
    """A read answer (`read_event`, `read_surface`, `read_session`) with every event's
    `data.raw` left out; everything else unchanged."""
    if isinstance(value, list):
        return [strip_raw(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "type" in value and "seq" in value and isinstance(value.get("data"), dict):
        return without_raw(value)
    return {k: strip_raw(v) if k in ("event", "events", "before", "after") else v
            for k, v in value.items()}


# --- sessions -----------------------------------------------------------------------------------

SESSION_COLUMNS = ("id", "agent", "events", "first", "last", "live", "cwd", "title")


def session_rows(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """A listing's rows (SESSION_COLUMNS) of its records, untrusted text escaped: one scan of
    the listing's text finds whether any needs it."""
    rows: list[tuple[str, ...]] = []
    for record in records:
        header = record["header"]
        title = record.get("title")
        rows.append((str(header["id"]), str(record.get("agent") or "-"),
                     str(record.get("eventCount", 0)), ms_to_minute(record.get("firstEventTime")),
                     ms_to_minute(record.get("lastEventTime")),
                     "live" if record.get("live") else "-", str(header.get("cwd") or "-"),
                     _collapsed(title) if isinstance(title, str) and title.strip()
                     else "untitled"))
    if needs_escape("".join(map("".join, rows))):
        return [(visible(i), visible(a), n, first, last, live, visible(cwd), visible(title))
                for i, a, n, first, last, live, cwd, title in rows]
    return rows


def _collapsed(text: str) -> str:
    """`text`'s whitespace runs as single spaces, ends stripped (one_line before escaping)."""
    # The space is the only whitespace Python counts as printable: printable text without
    # doubled or outer spaces is already collapsed (a listing's titles mostly are).
    if text.isprintable() and "  " not in text and text[0] != " " and text[-1] != " ":
        return text
    return " ".join(text.split())


def session_row(record: Mapping[str, Any]) -> tuple[str, ...]:
    return session_rows([record])[0]


# --- search hits --------------------------------------------------------------------------------

def where(hit: Mapping[str, Any]) -> str:
    return (f"seq {hit['seq']} | {visible(hit['type'])} | {hit['surface']} | "
            f"{ms_to_iso(hit['time'])}")


def session_hit_parts(n: int, item: Mapping[str, Any]) -> list[list[tuple[str, str]]]:
    """The lines of `session_hit_lines`, each as its (text, style) parts."""
    header, hit = item["header"], item["bestMatch"]
    facts = [visible(item.get("agent") or "-"), f"cwd {visible(header.get('cwd') or '-')}",
             f"{item.get('eventCount', 0)} events",
             f"last {ms_to_minute(item.get('lastEventTime'))}"]
    if item.get("live"):
        facts.append("live")
    return [[(f"{n}. ", "bold"), (visible(header["id"]), "bold"), (" — ", ""),
             (title_of(item), "")],
            [("   " + " · ".join(facts), "")],
            [(f"   best match: {where(hit)}", "")],
            [(f"   {visible(hit['snippet'])}", "")]]


def session_hit_lines(n: int, item: Mapping[str, Any]) -> list[Text]:
    """One cross-session hit: the session (id, title), its facts, the best match, the snippet."""
    from rich.text import Text

    return [Text.assemble(*parts) for parts in session_hit_parts(n, item)]


class HitGroup(NamedTuple):
    """Hits shown as one: a tool call matches as its `tool/call` and as the `assistant/message`
    carrying it, with the same text."""

    hits: list[Mapping[str, Any]]


def group_tool_calls(hits: Sequence[Mapping[str, Any]]) -> list[HitGroup]:
    """Pair each `tool/call` hit with an `assistant/message` hit of the page that has the same
    snippet and an earlier seq (the message that made the call); the rest stay alone. Order is
    the page's (a pair sits where its first hit was)."""
    groups: list[HitGroup] = []
    open_calls: dict[tuple[str, str], list[HitGroup]] = {}
    open_messages: dict[tuple[str, str], list[HitGroup]] = {}
    for hit in hits:
        key = (str(hit.get("sessionId")), str(hit.get("snippet")))
        kind = hit.get("type")
        partner: HitGroup | None = None
        if kind == "tool/call":
            partner = next((g for g in open_messages.get(key, [])
                            if int(g.hits[0]["seq"]) < int(hit["seq"])), None)
            if partner is not None:
                open_messages[key].remove(partner)
        elif kind == "assistant/message":
            partner = next((g for g in open_calls.get(key, [])
                            if int(g.hits[0]["seq"]) > int(hit["seq"])), None)
            if partner is not None:
                open_calls[key].remove(partner)
        if partner is not None:
            partner.hits.append(hit)
            continue
        group = HitGroup([hit])
        groups.append(group)
        if kind == "tool/call":
            open_calls.setdefault(key, []).append(group)
        elif kind == "assistant/message":
            open_messages.setdefault(key, []).append(group)
    return groups


def event_hit_lines(n: int, group: HitGroup) -> list[Text]:
    from rich.text import Text

    hits = sorted(group.hits, key=lambda h: int(h["seq"]))
    first = hits[0]
    head = " + ".join(f"seq {h['seq']} {visible(h['type'])}" for h in hits)
    return [Text.assemble((f"{n}. ", "bold"), head,
                          f" | {first['surface']} | {ms_to_iso(first['time'])}"),
            Text(f"   {visible(first['snippet'])}")]


# --- transcripts --------------------------------------------------------------------------------

def _source(event: Mapping[str, Any]) -> Mapping[str, Any]:
    message = message_of("user/message", event.get("data"))
    source = message.get("source") if message is not None else None
    return source if isinstance(source, dict) else {}


def role_of(event: Mapping[str, Any]) -> str:
    """Who speaks in an event, for a reader: the person, the assistant, a tool, or what
    injected a message (a plugin, a compaction, a reference)."""
    kind = str(event.get("type"))
    raw_data = event.get("data")
    data: Mapping[str, Any] = raw_data if isinstance(raw_data, dict) else {}
    if kind == "user/message":
        source = _source(event)
        who = source.get("kind")
        if who == "user":
            return "user"
        if who == "plugin" and source.get("plugin") == "compact":
            return "compaction summary"
        if who == "plugin":
            return f"injected ({visible(source.get('plugin') or 'plugin')})"
        if who == "session-reference":
            return "reference snapshot"
        return f"user ({visible(who)})" if who else "user"
    if kind == "assistant/message":
        return "assistant"
    if kind == "tool/call":
        return f"tool call {visible(data.get('name') or '')}".rstrip()
    if kind == "tool/result":
        inner = data.get("message")
        failed = (inner.get("isError") if isinstance(inner, dict) else None) or data.get("isError")
        return "tool result (error)" if failed else "tool result"
    return visible(kind)


def _marker(event: Mapping[str, Any]) -> str:
    """A compaction or replacement marker: what this event replaced on the surface."""
    op = event.get("surfaceOp")
    if isinstance(op, dict) and op.get("op") == "replace":
        start, end = op.get("start"), op.get("end")
        span = f"seq {start}" if start == end else f"seqs {start}–{end}"
        return f" ⟲ replaces {span}"
    return ""


_MESSAGE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})


def _preview(event: Mapping[str, Any]) -> str:
    """What to show of an event without semantic text: a message says so (reasoning is kept
    in the log, never indexed), anything else shows the start of its data."""
    kind = str(event.get("type"))
    if kind in _MESSAGE_TYPES:
        message = message_of(kind, event.get("data")) or {}
        blocks = message.get("content")
        if isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") == "reasoning"
                                            for b in blocks):
            return "(reasoning only: kept in the log, not indexed)"
        return "(no text)"
    data = without_raw(event).get("data")
    if data in (None, {}, []):
        return ""
    text = dumps(data).decode("utf-8")
    if len(text) > DATA_PREVIEW_CHARS:
        text = text[:DATA_PREVIEW_CHARS - 1] + "…"
    return visible(text)


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments for a multi-line view: one `key: value` per argument, a string
    value as its text (its newlines and tabs as layout, not JSON's `\\n`), anything else as JSON."""
    if not isinstance(arguments, dict):
        return arguments if isinstance(arguments, str) else dumps(arguments).decode("utf-8")
    return "\n".join(f"{key}: {value if isinstance(value, str) else dumps(value).decode()}"
                     for key, value in arguments.items())


def call_layout(event: Mapping[str, Any]) -> str | None:
    """The text of an event that makes tool calls, laid out for a multi-line view (the message's
    own words, then each call's name and arguments); None for any other event."""
    kind = str(event.get("type"))
    data = event.get("data")
    if kind == "tool/call" and isinstance(data, dict) and "name" in data:
        return f"{data.get('name')}\n{_arguments_text(data.get('arguments', data.get('input')))}"
    message = message_of(kind, data) if kind == "assistant/message" else None
    blocks = message.get("content") if message else None
    if not isinstance(blocks, list) or not any(
            isinstance(b, dict) and b.get("type") == "tool-call" for b in blocks):
        return None
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "tool-call":
            parts.append(f"→ {block.get('name') or block.get('toolName')}\n"
                         + _arguments_text(block.get("arguments", block.get("input"))))
    return "\n".join(parts)


def entry_lines(event: Mapping[str, Any], surface: str | None, text: str | None = None, *,
                target: bool = False) -> list[Text]:
    """One event of a transcript: a head line (marker, seq, role, surface badge, time,
    replacement marker), then its semantic text indented; structural events show a preview of
    their data instead. Shadowed events are dimmed, the target of `show` is bold."""
    from rich.text import Text

    laid_out = call_layout(event)
    body = laid_out if laid_out is not None else extract_text(event) if text is None else text
    style = "bold" if target else (DIM if surface == "shadowed" else "")
    badge = f" [{surface}]" if surface else ""
    head = Text(f"{'▶' if target else '─'} seq {event.get('seq')} · {role_of(event)}{badge}"
                f" · {ms_to_iso(int(event.get('time') or 0))}{_marker(event)}", style=style)
    lines = [head]
    if body.strip():
        lines += [Text(f"    {line}", style="" if target else style)
                  for line in visible(body, keep_newlines=True).splitlines()]
    else:
        preview = _preview(event)
        if preview:
            lines.append(Text(f"    {preview}", style=DIM))
    return lines


def read_lines(result: Mapping[str, Any]) -> list[Text]:
    """`read_event`'s answer as a transcript window: neighbours, the target, neighbours."""
    from rich.text import Text

    header = result["session"]
    lines = [Text.assemble(("session ", "bold"), (visible(header["id"]), "bold"),
                           f"  cwd {visible(header.get('cwd') or '-')}")]
    for entry in result["before"]:
        lines += entry_lines(entry["event"], entry["surface"], entry.get("text"))
    target = result["event"]
    lines += entry_lines(target["event"], target["surface"], target.get("text"), target=True)
    for entry in result["after"]:
        lines += entry_lines(entry["event"], entry["surface"], entry.get("text"))
    return lines


def surface_lines(result: Mapping[str, Any]) -> list[Text]:
    """`read_surface`'s answer: what the session's model sees, in model order."""
    from rich.text import Text

    header = result["session"]
    lines = [Text.assemble(("session ", "bold"), (visible(header["id"]), "bold"),
                           f"  current surface, captured through seq "
                           f"{result['capturedThroughSeq']}  ({len(result['events'])} events)")]
    for event in result["events"]:
        lines += entry_lines(event, None)
    return lines


# --- lineage ------------------------------------------------------------------------------------

def _named(header: Mapping[str, Any], titles: Mapping[str, str]) -> str:
    session_id = str(header["id"])
    title = titles.get(session_id)
    return visible(session_id) + (f" — {one_line(title)}" if title else "")


def session_trace_lines(trace: Mapping[str, Any], titles: Mapping[str, str]) -> list[Text]:
    """A session's lineage: its ancestors nearest first, then its descendants as a tree."""
    from rich.text import Text

    lines = [Text.assemble(("session ", "bold"), (_named(trace["session"], titles), "bold"))]
    ancestors = trace.get("ancestors") or []
    lines.append(Text("ancestors (nearest first):"))
    if not ancestors and trace.get("complete", True):
        lines.append(Text("  - none (a root session)"))
    lines += [Text(f"  - {_named(h, titles)}") for h in ancestors]
    if not trace.get("complete", True):
        lines.append(Text(f"  - {visible(trace.get('unresolvedParentId'))} (not in the index)",
                          style="yellow"))
    lines.append(Text("descendants:"))
    stack: list[tuple[int, Mapping[str, Any]]] = [
        (1, n) for n in reversed(trace.get("descendants") or [])]
    if not stack:
        lines.append(Text("  - none"))
    while stack:
        depth, node = stack.pop()
        lines.append(Text(f"{'  ' * depth}- {_named(node['header'], titles)}"))
        stack.extend((depth + 1, child) for child in reversed(node.get("children") or []))
    return lines


def _seqs(values: Iterable[int] | None) -> str:
    if values is None:
        return "not recorded"
    shown = [str(v) for v in values]
    return ", ".join(shown) if shown else "none"


#: Lines of the event's text `recall trace SESSION SEQ` shows above the trace: enough to know
#: which event it is; the whole body is what `recall show` is for.
TRACE_BODY_LINES = 3


def event_trace_lines(trace: Mapping[str, Any], read: Mapping[str, Any] | None) -> list[Text]:
    """How one event relates to others: what replaced it, what it replaced, what it cites."""
    from rich.text import Text

    header = trace["session"]
    lines = [Text.assemble(("session ", "bold"), (visible(header["id"]), "bold"))]
    if read is not None:
        target = read["event"]
        shown = entry_lines(target["event"], target["surface"], target.get("text"), target=True)
        hidden = len(shown) - 1 - TRACE_BODY_LINES
        if hidden > 0:
            shown = [*shown[:1 + TRACE_BODY_LINES],
                     Text(f"    … {hidden} more lines: recall show {visible(header['id'])} "
                          f"{target['event'].get('seq')}", style=DIM)]
        lines += shown
    replaced_by = trace.get("replacedBy")
    chain = trace.get("replacementChain") or []
    lines += [Text(f"replaced by: {'none' if replaced_by is None else f'seq {replaced_by}'}"),
              Text(f"replacement chain: {' → '.join(f'seq {s}' for s in chain) or 'none'}"),
              Text(f"events it replaced: {_seqs(trace.get('replacedEventSeqs') or [])}"),
              Text(f"events it cites as sources: {_seqs(trace.get('sourceEventSeqs'))}"),
              Text(f"events derived from it: {_seqs(trace.get('derivedEventSeqs') or [])}")]
    return lines
