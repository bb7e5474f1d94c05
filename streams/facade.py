"""Entry point for Python callers: `Recall`, one API over the embedded or the Kafka runtime."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from projections.errors import (
    RECALL_UNSUPPORTED_HERE,
    SESSION_QUERY_SESSION_NOT_FOUND,
    RecallError,
    SessionQueryError,
)
from streams.facade_read import index_build_progress as _index_build_progress
from streams.requests import SearchOptions as SearchOptions
from streams.requests import build_request as build_request
from streams.requests import search_request as search_request

# The runtimes, the index and the service load when first used: a command imports only what
# it runs (`recall search` never loads the ingest edge or the Kafka client).
# Settings too (pydantic): `recall search`'s read path (streams/facade_read.py) takes the light
# reader's values instead.
if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from indexer import QueryService
    from streams.core.settings import Settings
    from streams.ingest.edge import IngestReport
    from streams.ingest.hook import HookPayload
    from streams.ingest.watch import Watcher
    from streams.service.operations import AMBIGUOUS_SHOWN as AMBIGUOUS_SHOWN
    from streams.service.operations import pick_sessions as pick_sessions
    from streams.service.owned import user_message as user_message
    from streams.service.reference import ReferenceService

#: Names the faces take from here, loaded on first use.
_LAZY = {"AMBIGUOUS_SHOWN": "streams.service.operations",
         "pick_sessions": "streams.service.operations",
         "user_message": "streams.service.owned"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


SESSION_NOT_FOUND = SESSION_QUERY_SESSION_NOT_FOUND

#: Operations that need no open index (they still work while it is damaged).
_INDEX_FREE = frozenset({"index_generation"})



class _Importers(Mapping[str, Any]):
    """The importer registry, loaded when an ingest first asks for an importer (a read never
    does; the registry imports every importer)."""

    def _registry(self) -> Mapping[str, Any]:
        from streams.ingest.importers import IMPORTERS

        return IMPORTERS

    def __getitem__(self, name: str) -> Any:
        return self._registry()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry())

    def __len__(self) -> int:
        return len(self._registry())


def _detect_format(path: Path, head: bytes) -> str | None:
    from streams.ingest.importers import detect_format

    return detect_format(path, head)


def importer_options() -> dict[str, Any]:
    """The foreign-format importers and their detector, for the ingest edge."""
    return {"importers": _Importers(), "detect": _detect_format}


class Backend(Protocol):
    """What `Recall` needs of a runtime: the embedded one in-process (`EmbeddedBackend`) or the
    Kafka client (streams/runtime/kafka/client.py)."""

    def call(self, op: str, args: Mapping[str, Any]) -> Any: ...

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]: ...

    def replay(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]: ...

    def create_session(self, header: Mapping[str, Any]) -> dict[str, Any]: ...

    def build_substring_index(self) -> int: ...

    def close(self) -> None: ...


def _unsupported_here(what: str, hint: str) -> RecallError:
    return RecallError(f"{what} reads shard files on this machine",
                       code=RECALL_UNSUPPORTED_HERE, hint=hint)


class EmbeddedBackend:
    """Operations over the embedded runtime, in-process."""

    def __init__(self, settings: Settings, **runtime_options: Any) -> None:
        self.settings = settings
        from streams.runtime.embedded.runtime import EmbeddedRuntime

        self.runtime = EmbeddedRuntime(settings, **runtime_options)
        self._query: QueryService | None = None
        self._attach()

    def _attach(self) -> None:
        """A query service over the runtime's live shards (none while the index is damaged)."""
        if self._query is not None:
            self._query.close()
            self._query = None
        shards = self.runtime.open_shards
        self._attached = self.runtime.damage is None and shards is not None
        if shards is None or not self._attached:
            return
        self._shards = shards
        from indexer import QueryService
        from streams.service.reference import ReferenceService

        self._query = QueryService(self._shards, progress=_index_build_progress)
        self._reference = ReferenceService(
            self._query, self._append, max_references=self.settings.max_references,
            max_reference_bytes=self.settings.max_reference_bytes,
            candidate_limit=self.settings.candidate_limit)

    def _follow(self) -> None:
        """Answer from the generation that is live now: another process may have reindexed
        (one small file read per call), or a write of ours reopened the shards."""
        self.runtime.follow_live()
        if self.runtime.open_shards is not (self._shards if self._attached else None) \
                or (self.runtime.damage is None) != self._attached:
            self._attach()

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        if self._query is not None:
            self._query.close()
            self._query = None
        try:
            return self.runtime.reindex(progress)
        finally:
            self._attach()

    def replay(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Embedded replay: the store is the log, so replaying it is a rebuild into a fresh
        generation (the same job as reindex)."""
        return self.reindex(progress)


    def query(self) -> QueryService:
        self._follow()
        if self._query is None:
            raise self.runtime.damage or SessionQueryError("the index is not open")
        return self._query

    def reference(self) -> ReferenceService:
        self.query()
        return self._reference

    def generation(self) -> str:
        return self.runtime.generations.live_name() or ""

    def _append(self, session_id: str, events: Sequence[Mapping[str, Any]]) -> list[int]:
        # Numbered under the lock, from state revalidated under it: another writer may have
        # appended to this session since the reference was prepared.
        from streams.service.owned import require_writer
        from streams.service.reference import number_events

        with self.runtime.writing():
            stored = self.runtime.store.load(session_id)
            if stored is None:
                raise SessionQueryError(f"session {session_id!r} not found",
                                        code=SESSION_QUERY_SESSION_NOT_FOUND)
            require_writer(stored.header)  # the store's header is the authority, under the lock
            return self.runtime.append_events(stored.header,
                                              number_events(stored.state.next_seq, events))

    def create_session(self, header: Mapping[str, Any]) -> dict[str, Any]:
        """Store a new session recall writes: its header line, indexed at once."""
        from streams.service.owned import SessionExists

        with self.runtime.writing():
            if self.runtime.store.load(str(header["id"])) is not None:
                raise SessionExists(f"session {header['id']!r} already exists")
            self.runtime.append_events(header, [])
        self._follow()
        return dict(header)

    def call(self, op: str, args: Mapping[str, Any]) -> Any:
        from streams.service.operations import dispatch

        return dispatch(self, op, args)

    def ingest(self, paths: Sequence[Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        try:
            return self.runtime.ingest(paths, fmt=fmt, progress=progress)
        finally:
            self._follow()

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every parked record of this data dir's dead-letter file."""
        return self.runtime.dead_letters.read()

    def index_stats(self) -> list[dict[str, Any]]:
        from indexer.maintenance import check_integrity, shard_stats

        shards = self.runtime.shards
        rows = shard_stats(shards)
        problems = check_integrity(shards)
        for row in rows:
            row["problems"] = problems.get(row["shard"], [])
        return rows

    def substring_ready(self) -> bool:
        self._follow()
        shards = self.runtime.open_shards
        return shards is not None and shards.has_substring()

    def build_substring_index(self) -> int:
        self._follow()
        return self.runtime.shards.ensure_substring(_index_build_progress)

    def ingest_unless_busy(self, paths: Sequence[Path]) -> bool:
        """Ingest unless another process holds the writer lock (then it is not waited for)."""
        with self.runtime.try_writing() as held:
            if held:
                self.ingest(paths)
        return held

    def close(self) -> None:
        if self._query is not None:
            self._query.close()
            self._query = None
        self.runtime.close()


class Recall:
    """Search and reference over session logs. `Recall.open(dir)` runs embedded (no Kafka);
    `Recall.connect("kafka://host:port")` talks to query workers over the request topic."""

    def __init__(self, backend: Backend, settings: Settings) -> None:
        self.backend = backend
        self.settings = settings
        self._redact: Callable[[str], str] | None = None

    def redact_text(self, text: str) -> str:
        """`text` with every secret the redaction rules (these settings') find replaced by its
        marker: for showing what never reached the index, such as a parked line's bytes."""
        if self._redact is None:
            from streams.core.detectors import build_redactor

            self._redact = build_redactor(self.settings).redact_text
        return self._redact(text)

    @classmethod
    def open(cls, data_dir: str | Path | None = None, *, settings: Settings | None = None,
             **overrides: Any) -> Recall:
        from streams.core.settings import load_settings

        changes = dict(overrides)
        if data_dir is not None:
            changes["data_dir"] = Path(data_dir)
        if settings is None:
            resolved = load_settings(**changes)  # (a data dir given: no default looked for)
        else:
            resolved = settings.model_copy(update=changes) if changes else settings
        return cls(EmbeddedBackend(resolved, **importer_options()), resolved)

    @classmethod
    def connect(cls, broker_url: str, *, settings: Settings | None = None,
                **overrides: Any) -> Recall:
        from streams.core.settings import load_settings
        from streams.runtime.kafka.client import KafkaBackend

        resolved = (settings or load_settings()).model_copy(
            update={"broker": broker_url, **overrides})
        return cls(KafkaBackend(resolved, **importer_options()), resolved)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Recall:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- writes -------------------------------------------------------------------------------

    def ingest(self, paths: Sequence[str | Path], *, fmt: str = "auto",
               progress: Callable[[int, int], None] | None = None) -> IngestReport:
        report: IngestReport = self.backend.ingest([Path(p) for p in paths], fmt=fmt,
                                                   progress=progress)
        from streams.ingest.edge import iter_log_files
        from streams.ingest.importers.detect import passed_over

        walked = [Path(p) for p in paths]
        report.passed_over.extend(passed_over(walked, iter_log_files(walked)))
        return report

    def dead_letters(self) -> list[dict[str, Any]]:
        """Rejected input, parked with its original bytes (base64) and a reason code: the data
        dir's dead-letter file, or over Kafka the `<prefix>.dead-letter` topic."""
        return list(self.backend.dead_letters())

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Build a new index generation from the log and swap to it atomically."""
        return dict(self.backend.reindex(progress))

    def replay(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Rebuild all derived state from the log (embedded: the store; Kafka: rewound topics)."""
        return dict(self.backend.replay(progress))

    def index_digest(self) -> dict[str, Any]:
        """Layout-independent digest of the index contents: equal digests, equal indexes."""
        return dict(self.backend.call("index_digest", {}))

    def index_stats(self) -> list[dict[str, Any]]:
        """Per shard: rows, bytes, segments, generation, the redaction rules and the secrets
        redacted by kind, and `problems` (its integrity check; empty when sound)."""
        if not isinstance(self.backend, EmbeddedBackend):
            raise _unsupported_here("index stats", "run it with --data-dir set to a worker's "
                                    "RECALL_DATA_DIR/kafka-index host, or use `recall index "
                                    "digest` over Kafka")
        return self.backend.index_stats()

    def substring_ready(self) -> bool:
        """Whether a substring search answers without first building the substring index (an
        index made without RECALL_SUBSTRING): over Kafka, whether every shard owner has it
        (a search there never builds it: RECALL_SUBSTRING_INDEX_MISSING)."""
        if not isinstance(self.backend, EmbeddedBackend):
            return bool(self.backend.call("substring_index", {})["built"] == "all")
        return self.backend.substring_ready()

    def build_substring_index(self) -> int:
        """Extend the trigram index to every stored event (once; writers keep it complete from
        then on): the documents added. Embedded, a search in substring mode does this itself;
        over Kafka each shard owner builds its shard on this request alone."""
        return self.backend.build_substring_index()

    def ingest_unless_busy(self, paths: Sequence[str | Path]) -> bool:
        """Ingest `paths` now unless another writer holds the data dir (embedded; over Kafka
        nothing is done): True if ingested. For a caller that must not wait."""
        if not isinstance(self.backend, EmbeddedBackend):
            return False
        return self.backend.ingest_unless_busy([Path(p) for p in paths])

    def index_generation(self) -> str:
        """The name of the index generation answering queries (e.g. `gen-000002`)."""
        return str(self.backend.call("index_generation", {})["generation"])

    # --- search (PROTOCOL §3) ----------------------------------------------------------------------

    def search_sessions(self, query: str | None = None, *,
                        request: Mapping[str, Any] | None = None, now_ms: int | None = None,
                        **kwargs: Any) -> dict[str, Any]:
        """`{items: [{header, live, persisted, bestMatch}], nextCursor?}`."""
        args: dict[str, Any] = {"request": build_request(query, request, **kwargs)}
        if now_ms is not None:
            args["nowMs"] = now_ms
        return dict(self.backend.call("search_sessions", args))

    def search_events(self, session_id: str | None = None, query: str | None = None, *,
                      request: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """`{session, items: [hit], nextCursor?}` within one session."""
        req = build_request(query, request, **kwargs)
        if session_id is not None:
            req["sessionId"] = session_id
        return dict(self.backend.call("search_events", {"request": req}))

    # --- reads (PROTOCOL §3.1) ---------------------------------------------------------------------

    def list_sessions(self, *, cwd: str | None = None, agent: str | None = None,
                      title: str | None = None, limit: int | None = None,
                      filters: Sequence[Mapping[str, Any]] | None = None,
                      now_ms: int | None = None) -> list[dict[str, Any]]:
        """`[{header, live, persisted, title, titleSource, agent, eventCount, firstEventTime,
        lastEventTime}]`, newest first. `cwd`: that directory and everything under it;
        `agent`: e.g. `claude-code` or `dsh` (native logs); `title`: a literal,
        case-insensitive search of the titles; `filters`: any session filters (PROTOCOL §3.4 and
        the extensions of docs/PROTOCOL.md)."""
        from streams.service.operations import listing_args

        return list(self.backend.call("list_sessions", listing_args(
            cwd=cwd, agent=agent, title=title, limit=limit, filters=filters, now_ms=now_ms)))

    def resolve_session(self, session_id: str) -> str:
        """The full id a unique prefix or a bare id (without its `agent:` prefix) names.
        Every method taking a session id does this itself; `RECALL_AMBIGUOUS_SESSION` lists
        the candidates when several match."""
        return str(self.backend.call("resolve_session", {"sessionId": session_id})["sessionId"])

    def read_session(self, session_id: str) -> dict[str, Any]:
        return dict(self.backend.call("read_session", {"sessionId": session_id}))

    def read_surface(self, session_id: str) -> dict[str, Any]:
        return dict(self.backend.call("read_surface", {"sessionId": session_id}))

    def read_event(self, session_id: str, seq: int, *, before: int = 0,
                   after: int = 0) -> dict[str, Any]:
        return dict(self.backend.call("read_event", {"sessionId": session_id, "seq": seq,
                                                     "before": before, "after": after}))

    def read_transcript(self, session_id: str, *, page: int = 1, at: int | None = None,
                        limit: int) -> dict[str, Any]:
        """One page of the human transcript (`limit` entries a page): `page`, or the page
        holding seq `at` (indexer/transcript.py)."""
        return dict(self.backend.call("read_transcript", {"sessionId": session_id, "page": page,
                                                          "at": at, "limit": limit}))

    def trace_event(self, session_id: str, seq: int) -> dict[str, Any]:
        return dict(self.backend.call("trace_event", {"sessionId": session_id, "seq": seq}))

    def trace_session(self, session_id: str) -> dict[str, Any]:
        return dict(self.backend.call("trace_session", {"sessionId": session_id}))

    def filter_sessions(self, filters: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return list(self.backend.call("filter_sessions", {"filters": list(filters)}))

    def filter_events(self, session_id: str,
                      filters: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return dict(self.backend.call("filter_events", {"sessionId": session_id,
                                                        "filters": list(filters)}))

    # --- references (PROTOCOL §4) ------------------------------------------------------------------

    def prepare_reference(self, target_session_id: str, message: str | None = None, *,
                          references: Sequence[Mapping[str, Any]] = (),
                          content: Sequence[Mapping[str, Any]] | None = None,
                          dry_run: bool = False, message_id: str | None = None) -> dict[str, Any]:
        """`{content, additionalContext?, messages, delivery, appended?}`: appends `[context,
        readable]` to a target recall writes (`delivery: "appended"`); for any other target, or
        a dry run, nothing is appended and `messages` are for the host to deliver
        (`delivery: "returned"`)."""
        args: dict[str, Any] = {"targetSessionId": target_session_id,
                                "references": [dict(r) for r in references], "dryRun": dry_run}
        if content is not None:
            args["content"] = [dict(b) for b in content]
        else:
            args["message"] = message if message is not None else ""
        if message_id is not None:
            args["messageId"] = message_id
        return dict(self.backend.call("prepare_reference", args))

    # --- sessions recall writes (PROTOCOL §4.7, ours) -------------------------------------------------

    def create_session(self, session_id: str | None = None, *, cwd: str | None = None,
                       parent_session: str | None = None, agent_preset: str | None = None,
                       created_at: int | None = None) -> dict[str, Any]:
        """Create a session that recall writes (header `"writer": "recall"`); returns its
        header. References to it append `[context, readable]`; `append_events` adds to it."""
        from streams.service.owned import new_header

        header = new_header(session_id, cwd=cwd, parent_session=parent_session,
                            agent_preset=agent_preset, created_at=created_at)
        return dict(self.backend.create_session(header))

    def append_events(self, session_id: str,
                      events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Append events (`type`, `data`, `surfaceOp`?, `time`?, …; recall numbers them) to a
        session recall writes: `{sessionId, seqs}`; RECALL_NOT_WRITER for any other session."""
        return dict(self.backend.call("append_events", {"sessionId": session_id,
                                                        "events": [dict(e) for e in events]}))

    def append_message(self, session_id: str, text: str, *,
                       message_id: str | None = None) -> dict[str, Any]:
        """Append a person's message (`user/message`, source user) to a session recall writes."""
        from streams.service.owned import user_message

        return self.append_events(session_id, [user_message(text, message_id=message_id)])

    def list_candidates(self, target_session_id: str, query: str = "",
                        limit: int | None = None) -> list[dict[str, Any]]:
        args: dict[str, Any] = {"targetSessionId": target_session_id, "query": query}
        if limit is not None:
            args["limit"] = limit
        return list(self.backend.call("list_candidates", args))


# --- searches as the faces take them ---------------------------------------------------------------

def mark_queries(snippets: Sequence[str], query: str, *, substring: bool = False) -> list[str]:
    """Each snippet with U+FDD0/U+FDD1 around each match of the query, found the way the search
    matched it (snippets arrive without markers, PROTOCOL §3.7): FTS5's own highlight() with the
    index's tokenizer for a token search (one statement for the page), case-folded substrings
    for a trigram one (CJK or `substring`). A phrase the snippet's window cut stays unmarked."""
    from indexer.normalize import fts_phrase, normalize_query
    from indexer.search import choose_index
    from indexer.snippet import highlight_texts, mark_spans, substring_spans

    try:
        phrase = normalize_query(query)
    except RecallError:
        return list(snippets)
    if choose_index(phrase, "substring" if substring else "token") == "trigram":
        return [mark_spans(s, substring_spans(s, phrase)) for s in snippets]
    marked = highlight_texts(fts_phrase(phrase), dict(enumerate(snippets)))
    return [marked.get(i, s) for i, s in enumerate(snippets)]


def normalize_query(query: str) -> str:
    """A query as the service reads it (PROTOCOL §3.3 step 5: trimmed, whitespace collapsed);
    SESSION_QUERY_INVALID_QUERY when nothing is left."""
    from indexer.normalize import normalize_query as normalize

    return normalize(query)


# --- what else the faces need: importers, the index on disk, hooks, the watcher, the worker ------

def format_names() -> tuple[str, ...]:
    """The foreign formats the importers read (`--format`, `recall watch --agent`)."""
    from streams.ingest.importers import FORMAT_NAMES

    return tuple(FORMAT_NAMES)


def match_count_implementation() -> str:
    """Which match-count functions this process's index connections run: "compiled" (the C
    extension) or "python" (the fallback a build without a C compiler leaves)."""
    from indexer.matchcount import implementation

    return implementation()


def meaning_model_stored() -> bool:
    """Whether this machine holds the meaning model's table (else the first use of recall by
    meaning distills it, docs/semantic.md); True without the extra (nothing to distill)."""
    from indexer import semantic

    return semantic.table_stored()


def prepare_meaning_model(report: Callable[[int, int], None] | None = None) -> None:
    """Load the meaning model now, distilling and storing its table first if this machine has
    none, telling `report(tokens done, tokens)` meanwhile."""
    from indexer import semantic

    semantic.report_distilling(report)
    try:
        semantic.load_embedder()
    finally:
        semantic.report_distilling(None)


def log_files(paths: Sequence[Path]) -> list[Path]:
    """The files an ingest of `paths` reads, in the order it reads them."""
    from streams.ingest.edge import iter_log_files

    return list(iter_log_files(paths))


def redaction_totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Secrets redacted per kind over `index_stats` rows, most frequent first."""
    from indexer.maintenance import redaction_totals as totals

    return totals(rows)


def check_index(settings: Settings) -> dict[str, Any]:
    """The live index's integrity, from its files (works when it cannot even be opened):
    `{ok, generation, problems, damagedGenerations, fix}`."""
    if settings.broker:
        raise _unsupported_here("index check",
                                "run it with --data-dir set to a worker's data dir")

    from streams.runtime.embedded.runtime import EmbeddedRuntime

    runtime = EmbeddedRuntime(settings)
    try:
        return runtime.check()
    finally:
        runtime.close()


def run_worker(settings: Settings, roles: Sequence[str] = (), *, loglevel: str = "warning"
               ) -> None:
    """Run a Kafka worker with these roles (fold, index, query; none named: all)."""
    from streams.runtime.kafka.worker import ROLES
    from streams.runtime.kafka.worker import run_worker as run

    run(settings, list(roles) or list(ROLES), loglevel=loglevel)


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can read (created if missing)."""
    from streams.core.store import ensure_private_dir

    return ensure_private_dir(path)


def open_data_dir(path: Path) -> Path:
    """The data dir, created owner-only; a ConfigError if it cannot be one."""
    from streams.runtime.embedded.runtime import open_data_dir as open_dir

    return open_dir(path)


def hook_payload(stdin: bytes, argv: Sequence[str] = ()) -> HookPayload:
    """What an agent's hook says: a Claude Code payload (stdin) or a Codex `notify` payload
    (the last argument)."""
    from streams.ingest.hook import parse_payload

    return parse_payload(stdin, tuple(argv))


def record_hook(data_dir: Path, payload: HookPayload) -> None:
    """Remember the session's transcript and cwd in the data dir (the newest payload wins)."""
    from streams.ingest.hook import record

    record(open_data_dir(data_dir), payload)


def hook_report(data_dir: Path, session_id: str) -> dict[str, Any] | None:
    """What the hooks recorded for a session (`transcriptPath`, `cwd`, …), if anything."""
    from streams.ingest.hook import lookup

    return lookup(data_dir, session_id)


def latest_hook_report(data_dir: Path, cwd: str) -> dict[str, Any] | None:
    """The session a hook reported most recently for this working directory."""
    from streams.ingest.hook import latest_for_cwd

    return latest_for_cwd(data_dir, cwd)


def transcript_files(transcript: Path) -> list[Path]:
    """A transcript and the subagent transcripts its agent keeps beside it."""
    from streams.ingest.hook import transcript_files as files

    return files(transcript)


def watch_roots(agents: Sequence[str] = ()) -> list[Path]:
    """`RECALL_WATCH_PATHS` if set, else the default log folders of every supported agent (or
    of `agents`)."""
    from streams.ingest.watch import default_roots

    return default_roots(agents=agents)


def watch_lock(data_dir: Path) -> AbstractContextManager[None]:
    """The data dir's watcher lock for a run; RECALL_WATCH_RUNNING at once if another
    watcher has it."""
    from streams.ingest.watch import watch_lock as lock

    return lock(data_dir)


def watcher(recall: Recall, roots: Sequence[Path], emit: Callable[[dict[str, Any]], None], *,
            debounce_ms: int = 200) -> Watcher:
    """A watcher of `roots` whose batches `recall` ingests (embedded: its ingest; Kafka: the
    fleet shipper, which publishes only what is new per file)."""
    from streams.ingest.watch import Watcher

    return Watcher(recall, roots, emit, debounce_ms=debounce_ms)
