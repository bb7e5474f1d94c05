"""Ingest edge: helpers the importers' recognisers share (the first records of a file's head)."""

from __future__ import annotations

import re
from typing import Any

import zstandard

from projections.codec import JSONDecodeError, loads
from projections.logformat import ZSTD_MAGIC

_TYPE = re.compile(rb'"type"\s*:\s*"([^"]{1,64})"')


def plain_prefix(first_bytes: bytes) -> bytes:
    """Decompress as much of a zstd prefix as the bytes allow; plain bytes pass through."""
    if not first_bytes.startswith(ZSTD_MAGIC):
        return first_bytes
    try:
        out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(first_bytes)
        return out
    except zstandard.ZstdError:
        return b""


def head_lines(head: bytes, limit: int = 5) -> list[Any]:
    """The first non-blank lines: each parsed (any JSON value), or its bytes when it does not
    parse (a first line longer than the head, or not JSON at all)."""
    found: list[Any] = []
    for line in head.split(b"\n"):
        if not line.strip():
            continue
        try:
            found.append(loads(line))
        except JSONDecodeError:
            found.append(line)
        if len(found) >= limit:
            break
    return found


def is_record_stream(head: bytes) -> bool:
    """JSON Lines: the first non-blank line is a whole JSON object and more lines follow. A
    whole-document format never looks like that (its first line is `{`, or the document is one
    line), so its recogniser must not claim such a file for keys a record happens to hold."""
    first = head_lines(head, limit=2)
    return len(first) == 2 and isinstance(first[0], dict)


def envelope_type(line: bytes) -> str | None:
    """The `type` named near the start of a line too long to parse whole."""
    match = _TYPE.search(line[:512])
    return match.group(1).decode("utf-8", "replace") if match else None


def document_head(head: bytes) -> bytes:
    """The start of a (pretty-printed) JSON document with its whitespace squeezed out, so
    recognisers can look for `{"key":` patterns whatever the indentation."""
    return re.sub(rb"\s+", b"", head[:4096])
