"""Ingest edge: the importer registry, one entry per foreign format (what reads it, how it is
recognised, which files an agent writes and where, and whether a file is rewritten whole)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Protocol

from streams.ingest.importers.common import ImportedSession

Load = Callable[[bytes, str], list[ImportedSession]]
#: (bytes, source name, lines an earlier import read, next seq of a session id) → new events.
Resume = Callable[[bytes, str, int, Callable[[str], int]], list[ImportedSession]]


class Importer(Protocol):
    """What the ingest edge calls to import a file: bytes and source name → sessions (an
    `ImporterSpec`, or a bare function, which `as_spec` gives the defaults)."""

    def __call__(self, data: bytes, source_name: str, /) -> Any: ...


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
    - `late_time`: the format states no time, so the importer dates the session from the file's
      own metadata (its modification time), which moves as the file grows: a later import keeps
      the stored header when it differs only by `createdAt` (see `settle_header`).
    - `reads_source`: the importer reads the source itself, by its path (a database the agent
      keeps open: Crush's SQLite); the ingest edge does not read its bytes as lines, and knows
      it by name (`claims`) before reading anything. Such a format is also `whole_document`.
    - `companions`: suffixes of files beside the source whose changes are the source's (a
      SQLite `-wal`): their size and mtime join the source's in "unchanged", and `recall watch`
      ingests the source when they change.
    - `reads_beside`: names of files beside its sources that the importer reads too (Continue's
      `sessions.json` index): a directory walk does not list them as logs it passed over.
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
    late_time: bool = False
    reads_source: bool = False
    companions: tuple[str, ...] = ()
    reads_beside: tuple[str, ...] = ()
    resume: Resume | None = None

    def __call__(self, data: bytes, source_name: str) -> list[ImportedSession]:
        return self.load(data, source_name)

    def settle_header(self, stored: dict[str, Any] | None,
                      fresh: dict[str, Any]) -> dict[str, Any]:
        """The header to import under: `fresh`, except that a format whose cwd is recovered
        late keeps a stored header that differs only by lacking that cwd, and one dated from
        file metadata keeps a stored header that differs only by `createdAt`."""
        if self.late_cwd and stored is not None and "cwd" not in stored and "cwd" in fresh \
                and {k: v for k, v in fresh.items() if k != "cwd"} == stored:
            return stored
        if self.late_time and stored is not None and _without(stored, "createdAt") \
                == _without(fresh, "createdAt"):
            return stored
        return fresh

    @property
    def settles_header(self) -> bool:
        """Whether a fresh header may be settled against the stored one (`settle_header`)."""
        return self.late_cwd or self.late_time

    def extend(self, stored: list[dict[str, Any]],
               fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """For a whole-document format: the events of `fresh` (a new import of the document)
        that `stored` (what was imported before) lacks, renumbered to continue it."""
        from streams.ingest.importers.documents import extend_events
        return extend_events(stored, fresh)


def _without(header: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in header.items() if k != key}


def _never(*_: Any) -> bool:
    return False


def as_spec(name: str, importer: Importer) -> ImporterSpec:
    """`importer` as a spec: a registry spec as it is, a bare importer function with the
    defaults (appended lines, cwd stated up front, re-imported whole when grown; recognised by
    no file, so only `--format` or a detector reaches it)."""
    if isinstance(importer, ImporterSpec):
        return importer
    return ImporterSpec(name=name, load=importer, sniff=_never, claims=_never)
