"""Stage 3 of the flow, before extraction: secrets in an event become `[redacted:<kind>]` markers.

A pure function of the text and the rules. The rules themselves (detect-secrets' detectors plus
the agent-log rules and the user's own) are built at the edge (streams.detectors) and passed in,
so this module imports no detector library. Everything that leaves the log — the document text,
the raw event the index keeps, snippets, reads, traces, references — is made from the redacted
event, and the same event with the same rules always redacts to the same bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

#: Bump when this module's semantics change (the fingerprint then changes and indexes rebuild).
ENGINE_VERSION = 1
MARKER_PREFIX = "[redacted:"
#: A kind names what was found: lowercase words joined by hyphens (`github-token`).
KIND = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: Markers as they appear in stored (JSON) bytes, for counting what an index holds.
MARKER_BYTES = re.compile(rb"\[redacted:([a-z0-9]+(?:-[a-z0-9]+)*)\]")
#: The fingerprint of "no redaction".
OFF = "off"

Check = Callable[[str], bool]


def marker(kind: str) -> str:
    """The stable marker that replaces a secret of `kind`."""
    return f"{MARKER_PREFIX}{kind}]"


@dataclass(frozen=True, slots=True)
class Rule:
    """One detector: where the secret is in a match of `pattern` and when a match counts.

    `group` names the group holding the secret (a tuple: the first of those that matched; None:
    the first non-empty group, else the whole match — detect-secrets' convention). `hints` are literal substrings at least one of which
    every match contains (a fast pre-filter; empty means always run). `bounded` rejects a secret
    glued to more letters or digits (a token pattern inside a longer blob). `check` is a last
    word on the secret's value; `origin` says where the rule comes from (fingerprinted)."""

    kind: str
    pattern: re.Pattern[str]
    group: int | str | tuple[str, ...] | None = None
    hints: tuple[str, ...] = ()
    bounded: bool = False
    check: Check | None = None
    origin: str = ""

    def __post_init__(self) -> None:
        if not KIND.fullmatch(self.kind):
            raise ValueError(f"redaction kind {self.kind!r} must be lowercase words joined by '-'")
        for hint in self.hints:
            # Hints are also looked for in the event's JSON bytes: only characters JSON never
            # escapes keep "present in a string" ⇒ "present in its JSON".
            if not hint or not hint.isascii() or not hint.isprintable() or '"' in hint or "\\" in hint:
                raise ValueError(f"redaction hint {hint!r} must be printable ASCII without quotes")

    def spans(self, text: str) -> Iterable[tuple[int, int]]:
        """Where the secrets of this rule are in `text` (before the allow-list)."""
        for match in self.pattern.finditer(text):
            group = self.group
            if isinstance(group, tuple):
                group = next((g for g in group if match.group(g)), 0)
            elif group is None:
                group = next((g for g in range(1, self.pattern.groups + 1) if match.group(g)), 0)
            start, end = match.span(group)
            if start >= end:
                continue
            if self.bounded and ((start > 0 and text[start - 1].isalnum())
                                 or (end < len(text) and text[end].isalnum())):
                continue
            value = text[start:end]
            if MARKER_PREFIX in value:
                continue  # already redacted: redaction is idempotent
            if self.check is not None and not self.check(value):
                continue
            yield start, end

    def describe(self) -> list[Any]:
        check = "" if self.check is None else getattr(self.check, "__qualname__", repr(self.check))
        group = list(self.group) if isinstance(self.group, tuple) else self.group
        return [self.kind, self.pattern.pattern, int(self.pattern.flags), group,
                list(self.hints), self.bounded, check, self.origin]


@dataclass(frozen=True, slots=True)
class KeyRule:
    """JSON object entries whose key names a secret (`{"password": "…"}`): the whole string
    value is the secret when `check` accepts it."""

    kind: str
    key: re.Pattern[str]
    check: Check
    hints: tuple[str, ...] = ()

    def describe(self) -> list[Any]:
        return [self.kind, self.key.pattern, int(self.key.flags),
                getattr(self.check, "__qualname__", repr(self.check)), list(self.hints)]


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret found in a text: its span and kind (never its value)."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class Redactor:
    """Rules in priority order (where spans overlap, the earlier rule wins), an optional
    key rule for JSON objects, and an allow-list of values that are never redacted."""

    rules: tuple[Rule, ...] = ()
    key_rule: KeyRule | None = None
    allow: tuple[re.Pattern[str], ...] = ()
    enabled: bool = True
    fingerprint: str = field(init=False)
    _hints: tuple[bytes, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", self._fingerprint())
        hints: list[bytes] = []
        if all(r.hints for r in self.rules) and (self.key_rule is None or self.key_rule.hints):
            for rule in self.rules:
                hints.extend(h.encode() for h in rule.hints)
            if self.key_rule is not None:
                hints.extend(h.encode() for h in self.key_rule.hints)
        object.__setattr__(self, "_hints", tuple(dict.fromkeys(hints)))

    def _fingerprint(self) -> str:
        if not self.enabled:
            return OFF
        described = [ENGINE_VERSION, [r.describe() for r in self.rules],
                     None if self.key_rule is None else self.key_rule.describe(),
                     [[p.pattern, int(p.flags)] for p in self.allow]]
        return "v1-" + hashlib.blake2b(orjson.dumps(described), digest_size=10).hexdigest()

    # --- texts ----------------------------------------------------------------------------------

    def _allowed(self, value: str) -> bool:
        return any(p.fullmatch(value) for p in self.allow)

    def findings(self, text: str) -> list[Finding]:
        """The secrets in `text`, left to right, never overlapping: a rule's span is kept unless
        it overlaps one an earlier rule kept (so a token inside `password: …` is named by its
        token rule, and nothing inside a private key block is named apart from the block)."""
        if not self.enabled or not text:
            return []
        starts: list[int] = []
        kept: list[Finding] = []
        for rule in self.rules:
            if rule.hints and not any(h in text for h in rule.hints):
                continue
            for start, end in rule.spans(text):
                if self.allow and self._allowed(text[start:end]):
                    continue
                at = bisect.bisect_right(starts, start)
                if (at > 0 and kept[at - 1].end > start) or (at < len(kept)
                                                             and kept[at].start < end):
                    continue
                starts.insert(at, start)
                kept.insert(at, Finding(start, end, rule.kind))
        return kept

    def redact_text(self, text: str, counts: Counter[str] | None = None) -> str:
        """`text` with every secret replaced by its marker; kinds are tallied into `counts`."""
        found = self.findings(text)
        if not found:
            return text
        parts: list[str] = []
        at = 0
        for f in found:
            parts.append(text[at:f.start])
            parts.append(marker(f.kind))
            at = f.end
            if counts is not None:
                counts[f.kind] += 1
        parts.append(text[at:])
        return "".join(parts)

    # --- events ---------------------------------------------------------------------------------

    def might_redact(self, raw: bytes) -> bool:
        """False when no rule can match anything in the JSON `raw` (a fast pre-check)."""
        if not self.enabled:
            return False
        if not self._hints:
            return bool(self.rules or self.key_rule)
        return any(h in raw for h in self._hints)

    def _value(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            return self.redact_text(value, counts)
        if isinstance(value, list):
            out = [self._value(v, counts) for v in value]
            return value if all(a is b for a, b in zip(out, value, strict=True)) else out
        if isinstance(value, dict):
            changed = False
            result: dict[str, Any] = {}
            key_rule = self.key_rule
            for key, item in value.items():
                if (key_rule is not None and isinstance(item, str) and MARKER_PREFIX not in item
                        and key_rule.key.fullmatch(key) and key_rule.check(item)
                        and not (self.allow and self._allowed(item))):
                    new: Any = marker(key_rule.kind)
                    counts[key_rule.kind] += 1
                else:
                    new = self._value(item, counts)
                changed = changed or new is not item
                result[key] = new
            return result if changed else value
        return value

    def redact_event(self, event: Mapping[str, Any],
                     raw: bytes | None = None) -> tuple[Mapping[str, Any], Counter[str]]:
        """The event with every string inside its `data` redacted (keys, ids and the envelope
        stay as they are), and the kinds redacted. `raw`, the event's JSON if the caller has it,
        lets an event with nothing to redact skip the walk. Unchanged events are returned as is."""
        counts: Counter[str] = Counter()
        if not self.enabled or "data" not in event:
            return event, counts
        if raw is not None and not self.might_redact(raw):
            return event, counts
        data = event["data"]
        redacted = self._value(data, counts)
        if redacted is data:
            return event, counts
        out = dict(event)
        out["data"] = redacted
        return out, counts


#: The redactor that changes nothing (RECALL_REDACT=off, and the default of the pure API).
NO_REDACTION = Redactor(enabled=False)


def count_markers(raw: bytes) -> Counter[str]:
    """Markers in stored bytes, by kind (what `recall index stats` reports)."""
    if b"[redacted:" not in raw:
        return Counter()
    return Counter(m.decode("ascii") for m in MARKER_BYTES.findall(raw))
