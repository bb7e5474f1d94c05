"""Agent tools: presentation (PROTOCOL §6.3) — each answer is one plain-text block for the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from projections.codec import dumps_pretty
from streams.faces.mcp.timestamps import iso_utc
from streams.faces.textsafe import visible
from streams.faces.views import without_raw

NO_SESSION_MATCHES = "No prior session matches found."
NO_EVENT_MATCHES = "No prior event matches found."
CAPPED = "Result cap reached. Narrow the query or add filters to find additional matches."
OUTSIDE_WORKSPACE = "[outside workspace]"
OUTSIDE_BOUNDARY = "[outside workspace boundary]"
OUTSIDE_SUBTREE = "[outside workspace subtree]"


def one_line(text: str) -> str:
    """Collapse whitespace and escape what is left of control characters: titles and snippets
    must never break the layout or carry terminal escapes."""
    return visible(" ".join(text.split()))


def data(text: object) -> str:
    """An id, cwd or type as data: control characters and newlines written as escapes, so a
    hostile id cannot forge a result line."""
    return visible(text)


def availability(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "unavailable"
    parts = [name for name in ("live", "persisted") if record.get(name)]
    return ", ".join(parts) if parts else "unavailable"


def hit_line(hit: Mapping[str, Any]) -> str:
    return (f"seq {hit['seq']} | {data(hit['type'])} | {hit['surface']} | "
            f"{iso_utc(hit['time'])}")


@dataclass(frozen=True)
class SessionHit:
    """One accepted `session_search` row, with what the caller may know of its parent."""

    item: Mapping[str, Any]
    title: str
    parent: str


def session_search(hits: Sequence[SessionHit], capped: bool) -> str:
    if not hits:
        return NO_SESSION_MATCHES
    lines = [f"Session search results ({len(hits)}):"]
    for n, hit in enumerate(hits, start=1):
        header, best = hit.item["header"], hit.item["bestMatch"]
        lines += ["", f"{n}. Session {data(header['id'])} — {one_line(hit.title)}",
                  f"   Created: {iso_utc(header['createdAt'])}",
                  f"   Parent: {data(hit.parent)}",
                  f"   Availability: {availability(hit.item)}",
                  f"   Best match: {hit_line(best)}",
                  f"   Snippet: {one_line(best['snippet'])}"]
    if capped:
        lines += ["", CAPPED]
    return "\n".join(lines)


def event_search(session_id: str, title: str, hits: Sequence[Mapping[str, Any]],
                 capped: bool) -> str:
    if not hits:
        return NO_EVENT_MATCHES
    lines = [f"Session {data(session_id)} — {one_line(title)}",
             f"Event search results ({len(hits)}):"]
    for n, hit in enumerate(hits, start=1):
        lines += ["", f"{n}. {hit_line(hit)}", f"   Snippet: {one_line(hit['snippet'])}"]
    if capped:
        lines += ["", CAPPED]
    return "\n".join(lines)


@dataclass(frozen=True)
class TreeLine:
    """One rendered descendant: depth 0 is a direct child."""

    depth: int
    text: str


def session_trace(session_id: str, title: str, created_at: int, record: Mapping[str, Any] | None,
                  ancestors: Sequence[str], is_root: bool,
                  descendants: Sequence[TreeLine]) -> str:
    lines = [f"Session {data(session_id)} — {one_line(title)}", f"Created: {iso_utc(created_at)}",
             f"Availability: {availability(record)}", "Ancestors (nearest first):"]
    if is_root:
        lines.append("- none (target is a root session)")
    lines += [f"- {data(a)}" for a in ancestors]
    lines.append("Descendants:")
    if not descendants:
        lines.append("- none")
    lines += [f"{'  ' * d.depth}- {data(d.text)}" for d in descendants]
    return "\n".join(lines)


def _seqs(values: Sequence[int] | None) -> str:
    if values is None:
        return "none (provenance unrecorded)"
    return ", ".join(f"seq {v}" for v in values) if values else "none"


def event_trace(session_id: str, target: Mapping[str, Any], trace: Mapping[str, Any]) -> str:
    event = target["event"]
    replaced_by = trace.get("replacedBy")
    return "\n".join([
        f"Target: session {data(session_id)} | seq {event['seq']} | {data(event['type'])} | "
        f"{target['surface']} | {iso_utc(event['time'])}",
        f"Replaced by: {'none' if replaced_by is None else f'seq {replaced_by}'}",
        f"Replacement chain: {_seqs(trace.get('replacementChain') or [])}",
        f"Events replaced by target: {_seqs(trace.get('replacedEventSeqs') or [])}",
        f"Events cited directly as sources: {_seqs(trace.get('sourceEventSeqs'))}",
        f"Direct derived events: {_seqs(trace.get('derivedEventSeqs') or [])}",
    ])


def _neighbours(label: str, entries: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [f"{label}:"]
    if not entries:
        lines.append("- none")
    for entry in entries:
        event = entry["event"]
        head = f"- seq {event['seq']} | {data(event['type'])} | {iso_utc(event['time'])}"
        text = entry.get("text") or ""
        if not text.strip():
            lines.append(f"{head} | (no semantic text)")
            continue
        lines.append(head)
        lines += [f"  {data(line)}" for line in text.splitlines()]
    return lines


def event_read(session_id: str, read: Mapping[str, Any], show_before: bool,
               show_after: bool, *, include_raw: bool = False) -> str:
    """The target as JSON (without `data.raw`, the original agent record, unless asked), and
    the neighbours' semantic text."""
    target = read["event"]
    event = target["event"] if include_raw else without_raw(target["event"])
    lines = [f"Session {data(session_id)}"]
    if show_before:
        lines += _neighbours("Before", read.get("before") or [])
    lines += [f"Target: seq {event['seq']} | {data(event['type'])} | {target['surface']} | "
              f"{iso_utc(event['time'])}",
              "```json", visible(dumps_pretty(event), keep_newlines=True), "```"]
    if show_after:
        lines += _neighbours("After", read.get("after") or [])
    return "\n".join(lines)


def reference(provenance: Sequence[Mapping[str, Any]], prompt: str) -> str:
    lines = ["Prepared reference for your next message (dry run; nothing was appended):"]
    for ref in provenance:
        lines.append(
            f"- {data(ref['sessionId'])} — {one_line(str(ref['label']))}: captured through seq "
            f"{ref['capturedThroughSeq']}, {ref['retainedMessages']} of "
            f"{ref['originalMessages']} messages retained"
            + (f", {ref['omittedBytes']} bytes omitted" if ref.get("truncated") else ""))
    return "\n".join([*lines, "", visible(prompt, keep_newlines=True)])
