"""Ingest edge, fleet: what each source file has published to `<p>.events`, kept per file in
`<data_dir>/shipper.json` under the data dir's writer lock. One record for every Kafka-side
ingest of a data dir — `recall watch`/`recall hook` over Kafka (the fleet shipper) and
`recall ingest` over Kafka (streams/runtime/kafka/client.py) — so each sends only what the others have
not, and a grown file continues where the last of them stopped.

A file's entry: `size`/`mtime` (unchanged: not read), `format`, `target` (the cluster and topic
prefix it went to; another target starts over), `consumed`/`prefixHash` (bytes read and their
hash: a changed prefix is a rewrite), `lines` (lines read), and per session `published` (last
seq sent), `chains` (a running hash of the events sent, so a new import of the file is known to
extend them) and, for whole-document formats, `keys` (each event's `data.sourceKey` → seq, so a
rewritten document is continued as the embedded store would continue it).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.codec import JSONDecodeError, dumps_sorted, loads
from projections.logformat import Rejection
from streams.core.atomic import replace_file
from streams.core.lock import WriterLock
from streams.core.store import ensure_private_dir
from streams.ingest.importers.documents import extend_events, source_key
from streams.runtime.kafka.codec import encode_event_value

STATE_FILE = "shipper.json"
#: The running hash of a session that sent nothing yet.
EMPTY_CHAIN = ""

Record = tuple[bytes, bytes]
Imported = Sequence[tuple[dict[str, Any], list[dict[str, Any]], list[Rejection]]]


def target_of(bootstrap: str, prefix: str) -> str:
    """Where a file's events went: state kept for one cluster and prefix means nothing for
    another (a new cluster gets the whole file)."""
    return f"{bootstrap}/{prefix}"


class SentFiles:
    """The per-file record of what was published, read under the data dir's writer lock (the
    first hold always reads it; later ones when another process wrote since) and written when
    the caller says the broker acked."""

    def __init__(self, data_dir: Path, *, lock_timeout_s: float,
                 lock: WriterLock | None = None) -> None:
        ensure_private_dir(data_dir)
        self.path = data_dir / STATE_FILE
        self.lock = lock or WriterLock(data_dir, timeout_s=lock_timeout_s)
        self.state: dict[str, dict[str, Any]] = {}

    def _load(self) -> None:
        self.state = {}
        if self.path.exists():
            with contextlib.suppress(JSONDecodeError):
                loaded = loads(self.path.read_bytes())
                if isinstance(loaded, dict):
                    self.state = {k: v for k, v in loaded.items() if isinstance(v, dict)}

    @contextlib.contextmanager
    def hold(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The state, under the writer lock; saved when the block ends (however it ends: an
        entry is only updated after its file's records were acked)."""
        with self.lock.hold(lambda changed: self._load() if changed else None):
            try:
                yield self.state
            finally:
                self.save()

    def save(self) -> None:
        replace_file(self.path, dumps_sorted(self.state))

    def seen(self, key: str, target: str) -> dict[str, Any]:
        """A file's entry for this target (a copy; empty when new here)."""
        entry = self.state.get(key) or {}
        if entry.get("target") not in (None, target):
            return {}
        return dict(entry)


def chained(chain: str, events: Sequence[dict[str, Any]]) -> str:
    """The running hash of `chain` continued with `events` (key order does not matter)."""
    digest = chain
    for event in events:
        digest = hashlib.blake2b(digest.encode("ascii")
                                 + dumps_sorted(event),
                                 digest_size=16).hexdigest()
    return digest


@dataclass(slots=True)
class Fresh:
    """What one import adds beyond what the file published before."""

    records: list[Record] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    headers: int = 0
    events: int = 0
    sessions: set[str] = field(default_factory=set)
    #: Sessions whose new import does not extend what was sent (an append-only file rewritten
    #: in place, or mapped differently by an older importer version): nothing sent for them.
    conflicts: list[tuple[str, int]] = field(default_factory=list)


def fresh_records(imported: Imported, seen: dict[str, Any], *, resumed: bool, whole: bool,
                  first_line: int) -> Fresh:
    """The records to publish from a new import of a file, updating `seen` (its entry) as if
    they were sent. `resumed`: the import is an importer's `resume` (new events only, numbered
    after the published ones). Otherwise the whole file was imported again and, like the
    embedded ingest: the events it holds beyond the published ones are new when the published
    ones are its prefix; a whole-document format that changed before that point continues
    with the events whose `sourceKey` was not sent (streams/ingest/importers/documents.py); an
    append-only format that changed there is a conflict. Rejections: those of lines from
    `first_line` on, and those of no line (0)."""
    published: dict[str, int] = dict(seen.get("published") or {})
    chains: dict[str, str] = dict(seen.get("chains") or {})
    keys: dict[str, dict[str, int]] = {sid: dict(known) for sid, known
                                       in (seen.get("keys") or {}).items()}
    out = Fresh()
    for header, events, rejected in imported:
        sid = str(header["id"])
        key = sid.encode("utf-8")
        done = published.get(sid, -1)  # -1: not even the header went out yet
        if done < 0:
            out.records.append((key, encode_event_value(header)))
            out.headers += 1
            chains[sid] = EMPTY_CHAIN
            if whole:
                keys[sid] = {}
        chain = chains.get(sid)  # None: sent by a version that kept no hash
        sent = done + 1
        if resumed or chain is None:
            fresh = [e for e in events if int(e["seq"]) > done]
        elif len(events) >= sent and chained(EMPTY_CHAIN, events[:sent]) == chain:
            fresh = events[sent:]
        elif whole and sid in keys:
            # what extend_events needs of the stored events: how many, and each key's seq
            stand_in: list[dict[str, Any]] = [{"seq": seq} for seq in range(sent)]
            for source, seq in keys[sid].items():
                if 0 <= seq < sent:
                    stand_in[seq] = {"seq": seq, "data": {"sourceKey": source}}
            fresh = extend_events(stand_in, events)
        elif len(events) < sent and not whole:
            fresh = []  # a shorter import: nothing new (a changed prefix is the bytes' check)
        else:
            fresh = []
            out.conflicts.append((sid, sent))
        out.records.extend((key, encode_event_value(e)) for e in fresh)
        out.events += len(fresh)
        out.sessions.add(sid)
        published[sid] = max([done, *(int(e["seq"]) for e in fresh)])
        if chain is not None:
            chains[sid] = chained(chain, fresh)
        if whole and sid in keys:
            keys[sid].update({k: int(e["seq"]) for e in fresh
                              if (k := source_key(e)) is not None})
        out.rejections.extend(r for r in rejected if r.line >= first_line or r.line == 0)
    seen["published"] = published
    seen["chains"] = chains
    if whole:
        seen["keys"] = keys
    return out
