"""Reference stage: canonical `dsh-session:` URIs and `@[label](uri)` mentions in text (PROTOCOL §4.1)."""

from __future__ import annotations

import base64
import binascii
import re

from projections.codec import js_stringify, parse_js
from projections.errors import SessionReferenceError
from projections.snapshot import INVALID_REFERENCE, Reference

SCHEME = "dsh-session:"

_PAYLOAD = re.compile("[A-Za-z0-9_-]+")
# JavaScript's `\s` and `.` differ from Python's: spell the JS sets out so that a mention parses
# here exactly as it does in the reference system.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_DOT = "[^\n\r\u2028\u2029]"
_MENTION = re.compile(
    rf"@\[((?:\\{_JS_DOT}|[^\\\]])*)\]\(({SCHEME}[^{_JS_SPACE})]*)\)"
    rf"|({SCHEME}[A-Za-z0-9_-]+)"
)
_LABEL_ESCAPE = re.compile(r"[\\\]]")
_LABEL_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _invalid(uri: str) -> SessionReferenceError:
    return SessionReferenceError(f"invalid session reference URI {uri!r}", code=INVALID_REFERENCE,
                                 hint="use the canonical mention from `recall candidates`")


def encode_uri(session_id: str) -> str:
    """`dsh-session:` + unpadded base64url of JSON.stringify(id): lossless for any id string."""
    payload = base64.urlsafe_b64encode(js_stringify(session_id).encode("utf-8"))
    return SCHEME + payload.decode("ascii").rstrip("=")


def decode_uri(uri: str) -> str:
    """The session id of a canonical URI; anything else is INVALID_REFERENCE."""
    payload = uri[len(SCHEME):] if uri.startswith(SCHEME) else ""
    if not _PAYLOAD.fullmatch(payload) or len(payload) % 4 == 1:
        raise _invalid(uri)
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        # Invalid UTF-8 decodes to U+FFFD as in JS; the canonical check below then rejects it.
        decoded = parse_js(raw.decode("utf-8", errors="replace"))
    except (binascii.Error, ValueError):
        raise _invalid(uri) from None
    # Re-encoding catches padding bits, whitespace and escape spellings JSON.stringify never
    # writes: one id has exactly one URI, so dedup and self-reference checks cannot be fooled.
    if not isinstance(decoded, str) or encode_uri(decoded) != uri:
        raise _invalid(uri)
    return decoded


def escape_label(label: str) -> str:
    return _LABEL_ESCAPE.sub(lambda m: "\\" + m.group(), label)


def unescape_label(label: str) -> str:
    return _LABEL_UNESCAPE.sub(lambda m: m.group(1), label)


def format_mention(label: str | None, session_id: str) -> str:
    """The canonical mention `@[label](uri)`; an absent or empty label shows the id."""
    return f"@[{escape_label(label or session_id)}]({encode_uri(session_id)})"


def parse_mentions(text: str) -> tuple[str, list[Reference]]:
    """Replace every Markdown mention and bare URI with `@label`; references in order of
    appearance, before de-duplication. A malformed explicit URI or a non-canonical bare one
    raises INVALID_REFERENCE; `dsh-session:` without payload characters stays plain text."""
    references: list[Reference] = []

    def rewrite(match: re.Match[str]) -> str:
        raw_label, markdown_uri, bare_uri = match.groups()
        session_id = decode_uri(markdown_uri if markdown_uri is not None else bare_uri)
        label = session_id if raw_label is None else unescape_label(raw_label)
        references.append(Reference(session_id, label))
        return "@" + label

    return _MENTION.sub(rewrite, text), references
