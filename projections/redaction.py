"""Stage 3 of the flow, before extraction: secrets in an event become `[redacted:<kind>]` markers.

A pure function of the text and the rules. The rules themselves (detect-secrets' detectors plus
the agent-log rules and the user's own) are built at the edge (streams.core.detectors) and passed in,
so this module imports no detector library. Everything that leaves the log — the document text,
the raw event the index keeps, snippets, reads, traces, references — is made from the redacted
event, and the same event with the same rules always redacts to the same bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ahocorasick_rs import BytesAhoCorasick, Implementation

from projections.codec import dumps

#: Bump when this module's semantics change (the fingerprint then changes and indexes rebuild).
#: 2: a bounded rule's neighbours are ASCII letters and digits only (a token glued to `我`/`é`),
#: and the letter of an escape (`\nghp_…`) is none.
ENGINE_VERSION = 2
MARKER_PREFIX = "[redacted:"
#: A kind names what was found: lowercase words joined by hyphens (`github-token`).
KIND = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: Markers as they appear in stored (JSON) bytes, for counting what an index holds.
MARKER_BYTES = re.compile(rb"\[redacted:([a-z0-9]+(?:-[a-z0-9]+)*)\]")
#: The fingerprint of "no redaction".
OFF = "off"

Check = Callable[[str], bool]


def _glue(char: str) -> bool:
    """Whether `char` would make a token beside it part of a longer blob (ASCII letter or digit:
    `str.isalnum` would count every script's letters and keep `密钥AKIA…` in clear)."""
    return char.isascii() and char.isalnum()


def _escape(text: str, at: int) -> bool:
    """Whether `text[at]` is the letter of an escape (`\\n`, `\\t`: JSON quoted inside text, as a
    tool's output holds it): a token after it starts a line, it is not glued to an `n`."""
    return at > 0 and text[at] in "nrt" and text[at - 1] == "\\"


def marker(kind: str) -> str:
    """The stable marker that replaces a secret of `kind`."""
    return f"{MARKER_PREFIX}{kind}]"


@dataclass(frozen=True, slots=True)
class Rule:
    """One detector: where the secret is in a match of `pattern` and when a match counts.

    `group` names the group holding the secret (a tuple: the first of those that matched; None:
    the first non-empty group, else the whole match — detect-secrets' convention). `hints` are
    literal substrings at least one of which every match contains (a fast pre-filter; empty means
    always run). `bounded` rejects a secret glued to more ASCII letters or digits (a token pattern
    inside a longer blob: blobs are ASCII, while prose in any script may touch a token, as in
    `令牌ghp_…`). `check` is a last
    word on the secret's value; `origin` says where the rule comes from (fingerprinted)."""

    kind: str
    pattern: re.Pattern[str]
    group: int | str | tuple[str, ...] | None = None
    hints: tuple[str, ...] = ()
    bounded: bool = False
    check: Check | None = None
    origin: str = ""
    anchored: bool = False

    def __post_init__(self) -> None:
        if self.anchored and not self.hints:
            raise ValueError("an anchored rule needs hints")
        if not KIND.fullmatch(self.kind):
            raise ValueError(f"redaction kind {self.kind!r} must be lowercase words joined by '-'")
        for hint in self.hints:
            # Hints are also looked for in the event's JSON bytes: only characters JSON never
            # escapes keep "present in a string" ⇒ "present in its JSON".
            if not hint or not hint.isascii() or not hint.isprintable() or '"' in hint or "\\" in hint:
                raise ValueError(f"redaction hint {hint!r} must be printable ASCII without quotes")

    def _anchored_matches(self, text: str) -> Iterator[re.Match[str]]:
        starts: set[int] = set()
        for hint in self.hints:
            at = text.find(hint)
            while at >= 0:
                starts.add(at)
                at = text.find(hint, at + 1)
        reach = 0
        for at in sorted(starts):
            if at >= reach:
                match = self.pattern.match(text, at)
                if match is not None:
                    reach = max(match.end(), at + 1)
                    yield match

    def spans(self, text: str) -> Iterable[tuple[int, int]]:
        """Where the secrets of this rule are in `text` (before the allow-list)."""
        matches = self._anchored_matches(text) if self.anchored else self.pattern.finditer(text)
        for match in matches:
            group = self.group
            if isinstance(group, tuple):
                group = next((g for g in group if match.group(g)), 0)
            elif group is None:
                group = next((g for g in range(1, self.pattern.groups + 1) if match.group(g)), 0)
            start, end = match.span(group)
            if start >= end:
                continue
            if self.bounded and ((start > 0 and _glue(text[start - 1])
                                  and not _escape(text, start - 1))
                                 or (end < len(text) and _glue(text[end]))):
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
                list(self.hints), self.bounded, check, self.origin, self.anchored]


@dataclass(frozen=True, slots=True)
class KeyRule:
    """JSON object entries whose key names a secret (`{"password": "…"}`): the whole string
    value is the secret when `check` accepts it. `hints` are the words such a key *ends* with
    (a key is only looked at when one closes a key in the event's JSON: `…token":`)."""

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


class _Plan:
    """Which rules may match a text: those with a hint in it (found by one Aho-Corasick pass over
    the bytes — dozens of `in` scans per event cost more than the redaction itself), plus the
    hint-less ones."""

    def __init__(self, rules: tuple[Rule, ...], key_rule: KeyRule | None) -> None:
        by_hint: dict[str, list[int]] = {}
        always: list[int] = []
        for index, rule in enumerate(rules):
            if not rule.hints:
                always.append(index)
            for hint in dict.fromkeys(rule.hints):
                by_hint.setdefault(hint, []).append(index)
        key_hints = set(key_rule.hints) if key_rule is not None else set()
        for hint in key_hints:
            by_hint.setdefault(hint, [])
        self.hints: tuple[str, ...] = tuple(by_hint)
        self.rules_of: tuple[tuple[int, ...], ...] = tuple(tuple(v) for v in by_hint.values())
        self.key_hint: tuple[bool, ...] = tuple(h in key_hints for h in by_hint)
        self.always = tuple(always)
        self.key_always = key_rule is not None and not key_rule.hints
        # A DFA: one pass over an event's JSON whatever the number of hints, and faster than the
        # NFAs (bench/redaction.py measures the cost per event).
        self.automaton = BytesAhoCorasick([h.encode("ascii") for h in self.hints],
                                          implementation=Implementation.DFA) \
            if self.hints else None
        # a match then lies within one line of a segment (Redactor.hinted_lines)
        self.newline_free = not any("\n" in h for h in self.hints)

    def found(self, data: bytes, *, json: bool = True) -> tuple[list[int], bool]:
        """Indexes of the hints occurring in string *values* of `data`, ascending, and whether a
        key hint closes a JSON object key there (`…token":`). `data` is compact JSON (orjson's),
        where a key's closing quote, and only a key's, is followed by a colon: a hint inside a
        key (`"input_tokens":`) wakes no value rule. `json=False`: `data` is plain text, where
        every occurrence counts."""
        if self.automaton is None:
            return [], self.key_always
        hits: set[int] = set()
        keys = self.key_always
        for index, _, end in self.automaton.find_matches_as_indexes(data, overlapping=True):
            if index in hits:
                continue
            if not json:
                hits.add(index)
                continue
            if self.key_hint[index] and data.startswith(b'":', end):
                keys = True
                continue
            quote = data.find(b'"', end)
            if quote > 0 and data[quote - 1] != 0x5C and data.startswith(b":", quote + 1):
                continue  # inside a key (an escaped quote is taken for a value's: conservative)
            hits.add(index)
        return sorted(hits), keys

    def active(self, found: list[int]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple((self.hints[i], self.rules_of[i]) for i in found if self.rules_of[i])


Active = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Redactor:
    """Rules in priority order (where spans overlap, the earlier rule wins), an optional
    key rule for JSON objects, and an allow-list of values that are never redacted."""

    rules: tuple[Rule, ...] = ()
    key_rule: KeyRule | None = None
    allow: tuple[re.Pattern[str], ...] = ()
    enabled: bool = True
    fingerprint: str = field(init=False)
    _plan: _Plan = field(init=False, repr=False, compare=False)
    #: key → whether the key rule names it (keys repeat: `type`, `text`, `content`, …).
    _keys: dict[str, bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", self._fingerprint())
        object.__setattr__(self, "_plan", _Plan(self.rules, self.key_rule))
        object.__setattr__(self, "_keys", {})

    def _fingerprint(self) -> str:
        if not self.enabled:
            return OFF
        described = [ENGINE_VERSION, [r.describe() for r in self.rules],
                     None if self.key_rule is None else self.key_rule.describe(),
                     [[p.pattern, int(p.flags)] for p in self.allow]]
        return "v1-" + hashlib.blake2b(dumps(described), digest_size=10).hexdigest()

    # --- texts ----------------------------------------------------------------------------------

    def _allowed(self, value: str) -> bool:
        return any(p.fullmatch(value) for p in self.allow)

    def _candidates(self, text: str, active: Active) -> list[int]:
        found = [i for h, idx in active if h in text for i in idx]
        if self._plan.always:
            found.extend(self._plan.always)
        return sorted(set(found)) if len(found) > 1 else found

    def findings(self, text: str) -> list[Finding]:
        """The secrets in `text`, left to right, never overlapping: a rule's span is kept unless
        it overlaps one an earlier rule kept (so a token inside `password: …` is named by its
        token rule, and nothing inside a private key block is named apart from the block)."""
        if not self.enabled or not text:
            return []
        found, _ = self._plan.found(text.encode("utf-8", "surrogatepass"), json=False)
        candidates = sorted({i for _, idx in self._plan.active(found) for i in idx}
                            | set(self._plan.always))
        return self._findings(text, candidates)

    def _findings(self, text: str, candidates: list[int]) -> list[Finding]:
        starts: list[int] = []
        kept: list[Finding] = []
        for index in candidates:
            rule = self.rules[index]
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
        return _replace(text, self.findings(text), counts)

    # --- events ---------------------------------------------------------------------------------

    def _key_names_secret(self, key: str) -> bool:
        found = self._keys.get(key)
        if found is None:
            assert self.key_rule is not None
            found = self.key_rule.key.fullmatch(key) is not None
            if len(self._keys) < 4096:
                self._keys[key] = found
        return found

    def _value(self, value: Any, counts: Counter[str], active: Active, keys: bool) -> Any:
        kind = type(value)
        if kind is str:
            candidates = self._candidates(value, active) if active or self._plan.always else ()
            if not candidates:
                return value
            return _replace(value, self._findings(value, list(candidates)), counts)
        if kind is list:
            out = [self._value(v, counts, active, keys) for v in value]
            return value if all(a is b for a, b in zip(out, value, strict=True)) else out
        if kind is dict:
            changed = False
            result: dict[str, Any] = {}
            key_rule = self.key_rule
            for key, item in value.items():
                if (keys and key_rule is not None and type(item) is str
                        and self._key_names_secret(key) and MARKER_PREFIX not in item
                        and key_rule.check(item) and not (self.allow and self._allowed(item))):
                    new: Any = marker(key_rule.kind)
                    counts[key_rule.kind] += 1
                else:
                    new = self._value(item, counts, active, keys)
                changed = changed or new is not item
                result[key] = new
            return result if changed else value
        return value

    def hinted_lines(self, value: bytes) -> frozenset[int] | None:
        """Which `\\n`-separated pieces of `value` (compact JSON lines, as in a segment) may need
        a rule: those holding any hint (value or key: conservative). The others would come back
        from `redact_event` unchanged with their own bytes as `raw`, so a caller may skip it for
        them: one scan of a segment instead of one call per event (most lines hold no hint).
        None: every piece may (a rule or key rule without hints, or a hint with a newline)."""
        plan = self._plan
        if not self.enabled:
            return frozenset()
        if plan.always or plan.key_always or not plan.newline_free:
            return None
        if plan.automaton is None:
            return frozenset()
        lines: set[int] = set()
        line, at = 0, 0
        for end in sorted({end for _, _, end in plan.automaton.find_matches_as_indexes(
                value, overlapping=True)}):
            line += value.count(b"\n", at, end)
            at = end
            lines.add(line)
        return frozenset(lines)

    def redact_event(self, event: Mapping[str, Any],
                     raw: bytes | None = None) -> tuple[Mapping[str, Any], Mapping[str, int]]:
        """The event with every string inside its `data` redacted (keys, ids and the envelope
        stay as they are), and the kinds redacted. `raw`, the event's compact JSON (orjson's) if
        the caller has it (else its data is serialized), narrows the rules to those whose hints it contains (most
        events: none, and no walk).
        Unchanged events are returned as they are."""
        if not self.enabled or "data" not in event:
            return event, {}
        plan = self._plan
        found, keys = plan.found(dumps(event["data"]) if raw is None else raw)
        active = plan.active(found) if found else ()
        if not active and not plan.always and not keys:
            return event, {}
        counts: Counter[str] = Counter()
        data = event["data"]
        redacted = self._value(data, counts, active, keys)
        if redacted is data:
            return event, counts
        out = dict(event)
        out["data"] = redacted
        return out, counts


def _replace(text: str, found: list[Finding], counts: Counter[str] | None) -> str:
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


#: The redactor that changes nothing (RECALL_REDACT=off, and the default of the pure API).
NO_REDACTION = Redactor(enabled=False)


def count_markers(raw: bytes) -> Counter[str]:
    """Markers in stored bytes, by kind (what `recall index stats` reports)."""
    if b"[redacted:" not in raw:
        return Counter()
    return Counter(m.decode("ascii") for m in MARKER_BYTES.findall(raw))
