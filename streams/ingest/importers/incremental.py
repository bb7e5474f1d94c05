"""Ingest edge: a stable identity for the consumed prefix of a foreign file (grown vs rewritten).

Importers are deterministic and map records in file order without look-ahead, so re-importing a
file that only grew yields the earlier events as an exact prefix of the new ones. What the ingest
edge must check is that the bytes it already imported are unchanged; this module says so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from projections.logformat import decompress

Change = Literal["unchanged", "grown", "rewritten"]


@dataclass(frozen=True, slots=True)
class PrefixIdentity:
    """The complete lines of a file's (decompressed) bytes: their length and digest."""

    length: int
    digest: str

    def to_json(self) -> dict[str, object]:
        return {"length": self.length, "digest": self.digest}


def _complete(text: bytes) -> bytes:
    """Up to the last newline: a partial last line may still be being written."""
    return text[:text.rfind(b"\n") + 1]


def _digest(text: bytes) -> str:
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def prefix_identity(data: bytes) -> PrefixIdentity:
    """Identity of the complete lines in `data` (raw or zstd)."""
    done = _complete(decompress(data))
    return PrefixIdentity(len(done), _digest(done))


def classify_change(previous: PrefixIdentity, data: bytes) -> Change:
    """"unchanged" / "grown" (old lines intact, more after them) / "rewritten" (anything else:
    re-import as a new source, never merge)."""
    done = _complete(decompress(data))
    if len(done) < previous.length or _digest(done[:previous.length]) != previous.digest:
        return "rewritten"
    return "unchanged" if len(done) == previous.length else "grown"
