"""Entry point for people and scripts: the `recall` command (JSON with --json, rich otherwise).

This is the CLI's error edge, and the only one: `RecallGroup.main` turns every failure into one
`{"error": {"code", "message"}}` object (with --json) or one line naming the code and the next
step, and an exit status: 0 success, 1 the operation failed, 2 the invocation was not understood
(bad option, undecodable argument, malformed --request, bad setting). A Python traceback never
reaches the terminal: unexpected exceptions are logged to a file (streams/core/errorlog.py) and
reported as RECALL_INTERNAL_ERROR. Untrusted text is printed as data (streams/faces/textsafe.py).
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from projections.codec import dumps_pretty, loads_lossless
from projections.errors import (
    DISTRIBUTION,
    EXIT_ERROR,
    EXIT_USAGE,
    InputRejected,
    MissingExtra,
    RecallError,
    UsageError,
    is_usage,
)
from streams.core.errorlog import as_recall_error
from streams.core.settings import Settings, load_settings
from streams.facade import (
    SearchOptions,
    check_index,
    format_names,
    meaning_model_stored,
    prepare_meaning_model,
    redaction_totals,
    run_worker,
    search_request,
)
from streams.faces import views
from streams.faces.cli.common import (
    TEXT,
    F,
    LazyChoice,
    SafePath,
    console,
    emit_json,
    err_console,
    json_option,
    open_recall,
    print_columns,
    say,
    say_lines,
)
from streams.faces.cli.pipes import closed_pipe
from streams.faces.cli.progress import count_progress, ingest_progress
from streams.faces.textsafe import encodable, visible


def _wants_json(args: Sequence[str]) -> bool:
    return "--json" in args


def _render_error(code: str, message: str, hint: str, as_json: bool) -> None:
    message, hint = encodable(message), encodable(hint)
    if as_json:
        text = message if not hint else f"{message} ({hint})"
        emit_json({"error": {"code": code, "message": text}})
        return
    line = f"error {code}: {visible(message)}"
    if hint:
        line += f" — next: {visible(hint)}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class RecallGroup(click.Group):
    """The `recall` group, with the CLI's single error boundary in `main`."""

    data_dir_hint: Path | None = None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = _wants_json(argv)
        status = 0
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            status = result if isinstance(result, int) else 0
        except click.exceptions.Abort:
            sys.stderr.write("aborted\n")
            status = 130
        except click.ClickException as exc:
            failed: click.Context | None = getattr(exc, "ctx", None)
            hint = f"see `{failed.command_path} --help`" if failed is not None \
                else "see `recall --help`"
            _render_error(UsageError.code, exc.format_message(), hint, as_json)
            status = EXIT_USAGE
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            status = 130
        except BrokenPipeError:
            status = closed_pipe()
        except BaseException as exc:
            if isinstance(exc, SystemExit):
                raise
            error = self._as_recall_error(exc)
            _render_error(error.code, error.message, error.hint, as_json)
            status = EXIT_USAGE if is_usage(error.code) else EXIT_ERROR
        if standalone_mode:
            try:
                sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at exit
            except BrokenPipeError:
                status = closed_pipe()
            sys.exit(status)
        return status

    def _as_recall_error(self, exc: BaseException) -> RecallError:
        return as_recall_error(exc, self.data_dir_hint)


@click.group(cls=RecallGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION)
@click.option("--data-dir", type=SafePath(path_type=Path), envvar="RECALL_DATA_DIR",
              help="Embedded store, dead letters and index shards [env RECALL_DATA_DIR].")
@click.option("--broker", envvar="RECALL_BROKER", type=TEXT,
              help="kafka://HOST:PORT to use the Kafka runtime [env RECALL_BROKER].")
@click.pass_context
def main(ctx: click.Context, data_dir: Path | None, broker: str | None) -> None:
    """Search agent sessions (even what compaction hid) and reference them safely.

    \b
    Exit status: 0 success; 1 the operation failed (the error's code says why);
    2 the command line, a --request file or a RECALL_* setting was not understood;
    141 the reader of the output went away (`recall sessions | head -1`).
    """
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if broker:
        overrides["broker"] = broker
    group = ctx.command
    if isinstance(group, RecallGroup):
        group.data_dir_hint = data_dir
    settings = load_settings(**overrides)
    if isinstance(group, RecallGroup):
        group.data_dir_hint = Path(settings.data_dir)
    ctx.obj = settings
    if settings.semantic and not meaning_model_stored():
        # the first use of the model on a machine distills its table (seconds): on a terminal
        # that is done here, under a bar, before a command (or an ingest's writer process)
        # would wait on it silently; piped, the first use waits
        with count_progress(err_console, "preparing the meaning model (once per machine)",
                            True) as report:
            if report is not None:
                prepare_meaning_model(report)


# --- ingest -------------------------------------------------------------------------------------

@main.command()
@click.argument("paths", nargs=-1, required=True, type=SafePath(exists=True, path_type=Path))
@click.option("--format", "fmt", default="auto",
              type=LazyChoice(lambda: ["auto", "dsh", *format_names()]),
              help="Source format; auto detects per file.")
@json_option
@click.pass_context
def ingest(ctx: click.Context, paths: Sequence[Path], fmt: str, as_json: bool) -> None:
    """Ingest session logs (files or directories): native JSONL/zstd, or any supported agent's."""
    with open_recall(ctx) as recall, \
            ingest_progress(err_console, paths, console.is_terminal and not as_json) as progress:
        report = recall.ingest(paths, fmt=fmt, progress=progress)
    data = report.to_json()
    if as_json:
        emit_json(data)
        return
    acc = data["accounting"]
    say(f"{data['files']} files ({data['unchanged']} unchanged), {data['sessions']} sessions, "
        f"{data['eventsAdded']} events added, {data['duplicateLines']} duplicates, "
        f"{data['rejected']} rejected")
    say(f"  lines read {acc['linesRead']} = ingested {acc['ingested']} + duplicates skipped "
        f"{acc['duplicatesSkipped']} + parked {acc['parked']} + pending {acc['pending']}")
    for code, count in sorted(data["rejectedByCode"].items()):
        say(f"  parked {count} × {code} (see `recall dead-letters`)")
    for path in data["rewritten"]:
        say(("  rewritten source not merged: ", "yellow"), visible(path))
    for path in data["pendingSources"]:
        say(("  pending: ", "yellow"), visible(path),
            " ends in an unterminated line; it is ingested once a newline completes it")
    for item in data["unreadable"]:
        say(("  unreadable: ", "red"), visible(item["source"]), f" ({visible(item['error'])})")
    for item in data["passedOver"]:
        say(("  passed over: ", "yellow"), visible(item["path"]), f": {visible(item['why'])}; "
            f"to read it anyway: {visible(item['force'])}")
    if data["files"] == 0:
        say(("  no agent log found", "yellow"), " under the paths given: a walk reads *.jsonl, "
            "the files an agent writes under its own names, and JSON documents a supported "
            "format recognises; name a file and its --format to force it, or run `recall "
            "ingest` on an agent's folder (`recall watch --help` lists them)")


# --- search -------------------------------------------------------------------------------------

def iso_to_ms(value: str) -> int:
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{visible(value)[:80]!r} is not an ISO 8601 time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp() * 1000)


def event_filter_options(func: F) -> F:
    options = [
        click.option("--surface", "surfaces", multiple=True,
                     type=click.Choice(["current", "shadowed", "log-only"]),
                     help="Only events on this surface (repeatable)."),
        click.option("--type", "types", multiple=True, type=TEXT,
                     help="Only this event type (repeatable)."),
        click.option("--no-injected", "no_injected", is_flag=True,
                     help="Leave out injected context: user messages a plugin, the harness or "
                     "a reference put in (AGENTS.md, <environment_context>, system reminders, "
                     "reference snapshots). The person's prompts, compaction summaries and "
                     "every other event stay."),
        click.option("--since", type=TEXT, help="Events at or after this ISO time."),
        click.option("--until", type=TEXT, help="Events at or before this ISO time."),
        click.option("--limit", type=int, help="Page size (default 20, max 100)."),
        click.option("--cursor", type=TEXT, help="nextCursor of the previous page."),
        click.option("--request", "request_file", type=click.File("rb"),
                     help="The full request JSON (PROTOCOL §3.2, camelCase); '-' reads stdin."),
        click.option("--substring", is_flag=True, help="Substring (trigram) matching."),
        click.option("--semantic", is_flag=True,
                     help="Also by meaning: hybrid of the exact ranking and the local "
                     "embedding model's (needs the 'semantic' extra and RECALL_SEMANTIC=1)."),
        click.option("--mode", type=click.Choice(["lexical", "semantic", "hybrid"]),
                     help="Ranking: lexical (default), semantic (by meaning only) or hybrid."),
        click.option("--snapshot", is_flag=True,
                     help="Snapshot paging: later pages come from the first page's generation."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def event_options(query: str, surfaces: Sequence[str], types: Sequence[str],
                  no_injected: bool, since: str | None, until: str | None, limit: int | None,
                  cursor: str | None, substring: bool, snapshot: bool, semantic: bool = False,
                  mode: str | None = None) -> SearchOptions:
    """The search options the event filter options ask for (the words, if any, the query)."""
    return SearchOptions(query=query or None, surfaces=surfaces, types=types,
                         no_injected=no_injected,
                         time_from=iso_to_ms(since) if since else None,
                         time_to=iso_to_ms(until) if until else None, limit=limit,
                         cursor=cursor, substring=substring, snapshot=snapshot,
                         mode=mode or ("hybrid" if semantic else None))


def read_request(handle: Any) -> dict[str, Any]:
    """The --request file: one JSON object, read losslessly (else a usage error, exit 2)."""
    if handle is None:
        return {}
    data = handle.read()
    try:
        value = loads_lossless(data.strip() if isinstance(data, bytes) else data.encode())
    except InputRejected as exc:
        raise UsageError(f"the --request file is not a usable JSON object ({exc.code}: "
                         f"{exc.message})", hint="give the PROTOCOL §3.2 request as one JSON "
                         "object") from None
    if not isinstance(value, dict):
        raise UsageError(f"the --request file holds a JSON {type(value).__name__}, not an "
                         "object", hint="give the PROTOCOL §3.2 request as one JSON object")
    return value


def more(page: dict[str, Any]) -> None:
    """The next page's cursor, whole, on a line of its own."""
    if "nextCursor" in page:
        console.print(Text.assemble("more: --cursor ", visible(page["nextCursor"])),
                      soft_wrap=True)


@main.command()
@click.argument("words", nargs=-1, type=TEXT, metavar="QUERY...")
@event_filter_options
@click.option("--session", "sessions", multiple=True, type=TEXT,
              help="Only these sessions (full id, unique prefix, or the id without its "
              "agent prefix).")
@click.option("--cwd", "cwds", multiple=True, type=TEXT,
              help="Only sessions in this directory or below it (repeatable).")
@click.option("--agent", "agents", multiple=True, type=TEXT,
              help="Only sessions of this agent, e.g. claude-code, codex, dsh (repeatable).")
@json_option
@click.pass_context
def search(ctx: click.Context, words: Sequence[str], surfaces: Sequence[str],
           types: Sequence[str], no_injected: bool, since: str | None, until: str | None,
           limit: int | None, cursor: str | None, request_file: Any, substring: bool,
           semantic: bool, mode: str | None, snapshot: bool, sessions: Sequence[str],
           cwds: Sequence[str], agents: Sequence[str], as_json: bool) -> None:
    """Search across sessions for a literal phrase (the words, as typed): one hit per
    session, ranked by its best event."""
    options = event_options(" ".join(words), surfaces, types, no_injected, since, until, limit,
                            cursor, substring, snapshot, semantic, mode)
    request = read_request(request_file)
    if not words and "query" not in request:
        raise click.UsageError("missing QUERY: recall search QUERY... (the words to find)")
    with open_recall(ctx) as recall:
        options = options._replace(
            session_ids=[recall.resolve_session(s) for s in sessions], cwd_trees=cwds,
            agents=agents)
        request = search_request(options, request)
        page = recall.search_sessions(request=request)
    if as_json:
        emit_json(page)
        return
    if not page["items"]:
        say("No matches.")
    for n, item in enumerate(page["items"], start=1):
        say_lines(views.session_hit_lines(n, item))
    more(page)


@main.command()
@click.argument("words", nargs=-1, type=TEXT, metavar="SESSION QUERY...")
@event_filter_options
@json_option
@click.pass_context
def events(ctx: click.Context, words: Sequence[str], surfaces: Sequence[str],
           types: Sequence[str], no_injected: bool, since: str | None, until: str | None,
           limit: int | None, cursor: str | None, request_file: Any, substring: bool,
           semantic: bool, mode: str | None, snapshot: bool, as_json: bool) -> None:
    """Search the events of one session for a literal phrase. SESSION is a full id, a unique
    prefix, or the id without its agent prefix; with --request naming `sessionId`, every word
    is the query."""
    request = read_request(request_file)
    if "sessionId" not in request:
        if not words:
            raise click.UsageError("name the session: recall events SESSION QUERY...")
        request["sessionId"], words = words[0], words[1:]
    if not words and "query" not in request:
        raise click.UsageError("missing QUERY: recall events SESSION QUERY... (the words to "
                               "find in that session)")
    request = search_request(event_options(" ".join(words), surfaces, types, no_injected, since,
                                           until, limit, cursor, substring, snapshot,
                                           semantic, mode), request)
    with open_recall(ctx) as recall:
        page = recall.search_events(request=request)
    if as_json:
        emit_json(page)
        return
    say((visible(page["session"]["id"]), "bold"))
    if not page["items"]:
        say("No matches.")
    for n, group in enumerate(views.group_tool_calls(page["items"]), start=1):
        say_lines(views.event_hit_lines(n, group))
    more(page)


# --- reads --------------------------------------------------------------------------------------

@main.command()
@click.option("--cwd", type=TEXT, help="Only sessions in this directory or below it.")
@click.option("--agent", type=TEXT,
              help="Only sessions of this agent, e.g. claude-code, codex, dsh (native logs).")
@click.option("--title", type=TEXT,
              help="Only sessions whose title holds this text (case-insensitive).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (newest first).")
@json_option
@click.pass_context
def sessions(ctx: click.Context, cwd: str | None, agent: str | None, title: str | None,
             limit: int | None, as_json: bool) -> None:
    """List sessions, newest first: id, agent, events, first and last activity, live, cwd
    and title (the agent's title, else the person's first prompt)."""
    with open_recall(ctx) as recall:
        listing = recall.list_sessions(cwd=cwd, agent=agent, title=title, limit=limit)
    if as_json:
        emit_json(listing)
        return
    if not listing:
        say("No sessions.")
        return
    print_columns([views.SESSION_COLUMNS, *(views.session_row(r) for r in listing)])


def raw_option(func: F) -> F:
    return click.option("--raw", is_flag=True,
                        help="Include each event's data.raw (the original agent record).")(func)


def _emit_read(result: Any, raw: bool) -> None:
    emit_json(result if raw else views.strip_raw(result))


@main.command()
@click.argument("session_id", type=TEXT)
@raw_option
@json_option
@click.pass_context
def surface(ctx: click.Context, session_id: str, raw: bool, as_json: bool) -> None:
    """The current surface of a session: what its model sees, in model order."""
    with open_recall(ctx) as recall:
        result = recall.read_surface(session_id)
    if as_json:
        _emit_read(result, raw)
        return
    say_lines(views.surface_lines(result))
    if raw:
        _print_events(result["events"])


def _print_events(events: Sequence[dict[str, Any]]) -> None:
    for event in events:
        say((f"seq {event.get('seq')} (complete, with data.raw):", "bold"))
        say(visible(dumps_pretty(event),
                    keep_newlines=True))


@main.command()
@click.argument("session_id", type=TEXT)
@click.argument("seq", type=int)
@click.option("--before", type=int, default=0, help="Events before the target (max 50).")
@click.option("--after", type=int, default=0, help="Events after the target (max 50).")
@raw_option
@json_option
@click.pass_context
def show(ctx: click.Context, session_id: str, seq: int, before: int, after: int, raw: bool,
         as_json: bool) -> None:
    """Read one event with a window of neighbours, as a transcript (--json: the events)."""
    with open_recall(ctx) as recall:
        result = recall.read_event(session_id, seq, before=before, after=after)
    if as_json:
        _emit_read(result, raw)
        return
    say_lines(views.read_lines(result))
    if raw:
        _print_events([result["event"]["event"]])


@main.command()
@click.argument("session_id", type=TEXT)
@click.argument("seq", type=int, required=False)
@json_option
@click.pass_context
def trace(ctx: click.Context, session_id: str, seq: int | None, as_json: bool) -> None:
    """Lineage of a session, or the replacement/citation trace of one event."""
    with open_recall(ctx) as recall:
        if seq is not None:
            result = recall.trace_event(session_id, seq)
            read = None if as_json else recall.read_event(result["session"]["id"], seq)
        else:
            result = recall.trace_session(session_id)
            members = [str(result["session"]["id"]),
                       *(str(h["id"]) for h in result.get("ancestors") or [])]
            stack = list(result.get("descendants") or [])
            while stack:
                node = stack.pop()
                members.append(str(node["header"]["id"]))
                stack.extend(node.get("children") or [])
            titles = {} if as_json else {
                str(r["header"]["id"]): r["title"] for r in recall.list_sessions(
                    filters=[{"kind": "id", "values": members}]) if r.get("title")}
    if as_json:
        emit_json(result)
        return
    say_lines(views.session_trace_lines(result, titles) if seq is None
              else views.event_trace_lines(result, read))


@main.command("dead-letters")
@json_option
@click.pass_context
def dead_letters(ctx: click.Context, as_json: bool) -> None:
    """Rejected input, parked with its original bytes and a reason code (over Kafka: the
    dead-letter topic)."""
    with open_recall(ctx) as recall:
        parked = recall.dead_letters()
    if as_json:
        emit_json(parked)
        return
    for item in parked:
        size = item.get("length")
        say(f"{visible(item.get('code'))}  {visible(item.get('source'))}:{item.get('line')}  "
            f"{visible(item.get('reason'))}" + (f"  ({size} bytes)" if size is not None else ""))
    say(f"{len(parked)} parked records")


# --- index jobs ---------------------------------------------------------------------------------

@main.group()
def index() -> None:
    """Inspect the index: digest, per-shard stats, integrity; build the substring index."""


@index.command()
@json_option
@click.pass_context
def digest(ctx: click.Context, as_json: bool) -> None:
    """Deterministic digest of the index contents (independent of shards and generations)."""
    with open_recall(ctx.find_root()) as recall:
        result = recall.index_digest()
    if as_json:
        emit_json(result)
        return
    console.print(f"{result['digest']}  {result['sessions']} sessions, {result['events']} events",
                  highlight=False)


@index.command()
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Per-shard rows, bytes, generation, integrity, and the secrets redacted by kind."""
    with open_recall(ctx.find_root()) as recall:
        rows = recall.index_stats()
    if as_json:
        emit_json(rows)
        return
    print_columns([("shard", "sessions", "events", "documents", "bytes", "segments",
                    "generation", "problems"),
                   *((str(row["shard"]), str(row["sessions"]), str(row["events"]),
                      str(row["documents"]), str(row["bytes"]), str(row["segments"]),
                      str(row["generation"]), visible("; ".join(row["problems"]) or "ok"))
                     for row in rows)])
    # Kinds and counts only: the secrets themselves never leave the store.
    totals = redaction_totals(rows)
    rules = ", ".join(sorted({str(r["redaction"]) for r in rows}))
    redacted = ", ".join(f"{kind} {n}" for kind, n in totals.items()) or "none"
    console.print(Text(visible(f"redacted secrets: {redacted}  (rules {rules})")))
    kinds = {str(row.get("matchCount")) for row in rows}
    if kinds == {"compiled"}:
        say("match count: compiled C extension (indexer/_matchcount.c)")
    elif kinds:
        say(("match count: Python fallback", "yellow"), " (the C extension was not built: "
            "install with a C compiler and the SQLite headers, e.g. gcc and libsqlite3-dev, "
            "for faster ranking of very common terms)")


@index.command()
@json_option
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Integrity of the live index files: what is damaged and the command that repairs it
    (exit 1 when damaged). Works when the index cannot even be opened."""
    report = check_index(ctx.find_root().obj)
    if as_json:
        emit_json(report)
    else:
        state = ("ok", "green") if report["ok"] else ("DAMAGED", "red")
        say("index ", (str(report["generation"] or "-"), "bold"), ": ", state,
            " (read-only: reads work; writes need a writable data dir)"
            if report.get("readOnly") else "")
        for problem in report["problems"]:
            say(f"  {visible(problem)}")
        for name in report["damagedGenerations"]:
            say(f"  moved aside earlier: index/{visible(name)}")
        if report["fix"]:
            say(("fix: ", "bold"), report["fix"])
    if not report["ok"]:
        ctx.exit(1)


@index.command("substring")
@json_option
@click.pass_context
def substring_index(ctx: click.Context, as_json: bool) -> None:
    """Build the substring (trigram) index over every stored event, once: writers keep it
    current from then on. Searches over Kafka never build it; embedded, the first
    `recall search --substring` does."""
    with open_recall(ctx.find_root()) as recall:
        added = recall.build_substring_index()
    if as_json:
        emit_json({"built": "all", "documentsAdded": added})
        return
    say(f"substring index: built on every shard ({added} documents added)")


def _job(ctx: click.Context, name: str, as_json: bool) -> None:
    with open_recall(ctx) as recall, \
            count_progress(err_console, name, not as_json) as progress:
        result = getattr(recall, name)(progress)
    if as_json:
        emit_json(result)
        return
    say(f"{name}: generation {result['generation']} is live ({result['eventsIndexed']} "
        f"events indexed); digest {result['digest']}")
    for moved in result.get("movedAside") or []:
        say(("  the damaged generation was moved aside: ", "yellow"), visible(moved))


@main.command()
@json_option
@click.pass_context
def reindex(ctx: click.Context, as_json: bool) -> None:
    """Build a new index generation from the log beside the live one, then swap atomically."""
    _job(ctx, "reindex", as_json)


@main.command()
@json_option
@click.pass_context
def replay(ctx: click.Context, as_json: bool) -> None:
    """Discard derived state and rebuild it from the log (resumable; digest must not change)."""
    _job(ctx, "replay", as_json)


# --- Kafka worker -------------------------------------------------------------------------------

@main.command()
@click.option("--role", "roles", multiple=True, type=click.Choice(["fold", "index", "query"]),
              help="Run only these roles (repeatable; default: all three).")
@click.option("--loglevel", default="warning", show_default=True)
@click.pass_context
def worker(ctx: click.Context, roles: Sequence[str], loglevel: str) -> None:
    """Run a Kafka worker: fold processor, index consumer and query coordinator."""
    settings: Settings = ctx.obj
    if not settings.broker:
        raise click.UsageError("set --broker or RECALL_BROKER (e.g. kafka://127.0.0.1:9092)")
    run_worker(settings, roles, loglevel=loglevel)


# --- references ---------------------------------------------------------------------------------

def parse_source(value: str) -> dict[str, str]:
    session_id, sep, label = value.partition("=")
    return {"sessionId": session_id, "label": label} if sep else {"sessionId": session_id}


@main.command()
@click.option("--target", required=True, type=TEXT, help="The session the message is for.")
@click.option("--message", required=True, type=TEXT,
              help="The person's message; may hold @[label](uri).")
@click.option("--source", "sources", multiple=True, type=TEXT,
              help="ID[=LABEL] of a session to reference.")
@click.option("--dry-run", is_flag=True, help="Prepare and print; append nothing.")
@click.option("--message-id", type=TEXT, help="Id of the readable message (default: a new uuid).")
@json_option
@click.pass_context
def reference(ctx: click.Context, target: str, message: str, sources: Sequence[str],
              dry_run: bool, message_id: str | None, as_json: bool) -> None:
    """Pull frozen snapshots of other sessions into TARGET as [context, message]."""
    from projections.mentions import parse_mentions

    if not sources and not parse_mentions(message)[1]:
        raise click.UsageError(
            "a reference needs a source: --source ID[=LABEL], or a mention "
            "@[label](dsh-session:…) in --message (see `recall candidates --target`); to add a "
            "plain message, use `recall append SESSION --message TEXT`")
    with open_recall(ctx) as recall:
        result = recall.prepare_reference(target, message,
                                          references=[parse_source(s) for s in sources],
                                          dry_run=dry_run, message_id=message_id)
    if as_json:
        emit_json(result)
        return
    context = result.get("additionalContext")
    if context is not None:
        say(visible(context["content"][0]["text"], keep_newlines=True))
    say(f"message: {visible(result['content'][0].get('text', ''), keep_newlines=True)}")
    if "appended" in result:
        say(f"appended to {visible(target)} at seqs {result['appended']}")
    elif not dry_run:
        say(("not appended: ", "yellow"), visible(target), " is written by an outside source; "
            "deliver the two messages above through it (recall appends only to sessions it "
            "writes)")


#: Characters of a title in the candidates table (a first prompt can be long).
TITLE_CHARS = 60


@main.command()
@click.option("--target", required=True, type=TEXT, help="The session that would reference.")
@click.argument("query", required=False, default="", type=TEXT)
@click.option("--limit", type=int, help="How many candidates (default 50).")
@json_option
@click.pass_context
def candidates(ctx: click.Context, target: str, query: str, limit: int | None,
               as_json: bool) -> None:
    """Sessions TARGET could reference: same workspace first, with mention strings."""
    with open_recall(ctx) as recall:
        rows = recall.list_candidates(target, query, limit)
        # The listing's titles (an agent's own, else the first prompt's): a candidate's label
        # falls back to its bare id when the agent gave no title.
        titles = {} if as_json or not rows else {
            str(r["header"]["id"]): str(r["title"]) for r in recall.list_sessions(
                filters=[{"kind": "id", "values": [str(row["sessionId"]) for row in rows]}])
            if r.get("title")}
    if as_json:
        emit_json(rows)
        return
    if not rows:
        say("No candidates.")
        return
    table = [["session", "title", "cwd", "mention"]]
    for row in rows:
        sid = str(row["sessionId"])
        title = views.one_line(titles.get(sid) or (row["label"] if row["label"] != sid
                                                   else "untitled"))
        title = title if len(title) <= TITLE_CHARS else title[:TITLE_CHARS - 1] + "…"
        table.append([visible(sid), title, visible(row.get("cwd") or "-"),
                      visible(row["mention"])])
    print_columns(table)


# --- demo ---------------------------------------------------------------------------------------

@main.command()
@json_option
@click.option("--keep", type=SafePath(path_type=Path),
              help="Use this data dir (kept) instead of a temporary one.")
def demo(as_json: bool, keep: Path | None) -> None:
    """Run the whole job on bundled sample sessions in a temporary data dir."""
    from streams.faces.cli.demo import run_demo

    run_demo(console, as_json=as_json, data_dir=keep)


# --- mcp ----------------------------------------------------------------------------------------

@main.command("mcp")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP (bearer token required) instead of stdio.")
@click.option("--session", "session_id", envvar="RECALL_MCP_SESSION", type=TEXT,
              help="The calling agent's session id [env RECALL_MCP_SESSION].")
@click.option("--cwd", envvar="RECALL_MCP_CWD", type=TEXT,
              help="The caller's workspace; default: the client's first file:// root "
                   "[env RECALL_MCP_CWD].")
@click.option("--max-search-results", type=click.IntRange(min=1), default=100,
              envvar="RECALL_MCP_MAX_SEARCH_RESULTS", help="Cap on results per search call.")
@click.option("--search-timeout-ms", type=click.IntRange(min=1, max=2_147_483_647),
              default=30_000, envvar="RECALL_MCP_SEARCH_TIMEOUT_MS",
              help="Deadline of one search call.")
@click.option("--session-from-hooks", is_flag=True,
              help="Without --session: the session a `recall hook` reported last for this "
                   "workspace (--cwd, else the working directory).")
@click.pass_context
def mcp(ctx: click.Context, http: str | None, session_id: str | None, cwd: str | None,
        max_search_results: int, search_timeout_ms: int, session_from_hooks: bool) -> None:
    """Serve the session tools to an agent host over MCP (stdio, or --http HOST:PORT)."""
    try:
        from streams.faces.mcp.server import ServerOptions, normalize_cwd, parse_http, serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("mcp", "starlette", "uvicorn", "sse_starlette"):
            raise MissingExtra("mcp", str(exc.name)) from exc
        raise

    if http is not None:
        try:
            parse_http(http)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--http") from exc
    options = ServerOptions(session_id=session_id or None, cwd=normalize_cwd(cwd),
                            max_search_results=max_search_results,
                            search_timeout_ms=search_timeout_ms,
                            session_from_hooks=session_from_hooks,
                            data_dir=Path(ctx.obj.data_dir))
    settings: Settings = ctx.obj
    with open_recall(ctx) as recall:
        serve(recall, options, http=http, data_dir=Path(settings.data_dir))


# --- commands kept in their own modules (they use the helpers above) ---------------------------

def _register() -> None:
    from streams.faces.cli import live as livecli
    from streams.faces.cli import owned as ownedcli
    from streams.faces.cli import ui as uicli

    main.add_command(ownedcli.create)
    main.add_command(ownedcli.append)
    main.add_command(livecli.watch)
    main.add_command(livecli.hook)
    main.add_command(uicli.ui)


_register()


if __name__ == "__main__":  # pragma: no cover
    main()
