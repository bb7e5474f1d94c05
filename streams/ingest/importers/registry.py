"""Ingest edge: the importer registry, one entry per foreign format (what reads it, how it is
recognised, which files an agent writes and where, and whether a file is rewritten whole)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from streams.ingest.importers.common import ImportedSession

Load = Callable[[bytes, str], list[ImportedSession]]
#: (bytes, source name, lines an earlier import read, next seq of a session id) → new events.
Resume = Callable[[bytes, str, int, Callable[[str], int]], list[ImportedSession]]


@dataclass(frozen=True, slots=True)
class Location:
    """A directory an agent writes its logs under: `$<env>/<below>` when the variable is set,
    else `~/<default>`."""

    default: str
    env: str | None = None
    below: str = ""

    def resolve(self, environ: Mapping[str, str] | None = None,
                home: Path | None = None) -> Path:
        environ = os.environ if environ is None else environ
        if self.env and environ.get(self.env):
            base = Path(environ[self.env]).expanduser()
            return base / self.below if self.below else base
        return (home or Path.home()) / self.default


@dataclass(frozen=True, slots=True)
class ImporterSpec:
    """One foreign format. Calling the spec imports bytes (so the ingest edge can hold specs
    wherever it held importer functions).

    - `sniff(path, head)`: True when the first (decompressed) bytes are this format.
    - `claims(path)`: this agent writes files of this name; directory walks pick them up, and
      detection falls back to it when the content does not tell.
    - `locations`: where the agent keeps its logs by default (for `recall watch`).
    - `whole_document`: the agent rewrites the file whole (one JSON document) instead of
      appending lines, so "grown" is judged on the mapped events, not on the bytes.
    - `late_cwd`: the cwd is recovered from the records (not stated by the agent), so it may
      show up only after a session was first imported; the first observation's header is kept
      then (PROTOCOL §1.1 forbids changing it), see `settle_header`.
    - `resume(data, source, done, next_seq)`: for an append-only format whose events group
      several writes (Aider's runs of output lines), what a grown file adds after an import that
      read its first `done` lines, numbered from `next_seq(session id)`. Without it, a grown file
      re-imports whole and the store keeps the events it has not seen.
    """

    name: str
    load: Load
    sniff: Callable[[PurePath, bytes], bool]
    claims: Callable[[PurePath], bool]
    locations: tuple[Location, ...] = ()
    whole_document: bool = False
    late_cwd: bool = False
    resume: Resume | None = None

    def __call__(self, data: bytes, source_name: str) -> list[ImportedSession]:
        return self.load(data, source_name)

    def settle_header(self, stored: dict[str, Any] | None,
                      fresh: dict[str, Any]) -> dict[str, Any]:
        """The header to import under: `fresh`, except that a format whose cwd is recovered
        late keeps a stored header that differs only by lacking that cwd."""
        if self.late_cwd and stored is not None and "cwd" not in stored and "cwd" in fresh \
                and {k: v for k, v in fresh.items() if k != "cwd"} == stored:
            return stored
        return fresh

    def extend(self, stored: list[dict[str, Any]],
               fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """For a whole-document format: the events of `fresh` (a new import of the document)
        that `stored` (what was imported before) lacks, renumbered to continue it."""
        from streams.ingest.importers.documents import extend_events
        return extend_events(stored, fresh)
