"""Entry point for people and scripts: the `recall` command (JSON with --json, rich otherwise)."""

from __future__ import annotations

import datetime
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from projections.errors import RecallError
from streams.facade import Recall
from streams.importers import FORMAT_NAMES
from streams.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)


def emit_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n")


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print machine-readable JSON (camelCase, as SPEC.md).")(func)


def handle_errors(func: F) -> F:
    """Errors become `{"error": {code, message}}` with --json, a red line otherwise; exit 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RecallError as exc:
            if kwargs.get("as_json"):
                emit_json({"error": exc.to_json()})
            else:
                err_console.print(f"[red]error[/red] {exc.code}: {exc.message}"
                                  + (f"\n  hint: {exc.hint}" if exc.hint else ""),
                                  highlight=False)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@contextmanager
def open_recall(ctx: click.Context) -> Iterator[Recall]:
    settings: Settings = ctx.obj
    recall = (Recall.connect(settings.broker, settings=settings) if settings.broker
              else Recall.open(settings=settings))
    try:
        yield recall
    finally:
        recall.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="session-recall")
@click.option("--data-dir", type=click.Path(path_type=Path), envvar="RECALL_DATA_DIR",
              help="Embedded store, dead letters and index shards [env RECALL_DATA_DIR].")
@click.option("--broker", envvar="RECALL_BROKER",
              help="kafka://HOST:PORT to use the Kafka runtime [env RECALL_BROKER].")
@click.pass_context
def main(ctx: click.Context, data_dir: Path | None, broker: str | None) -> None:
    """Search agent sessions (even what compaction hid) and reference them safely."""
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if broker:
        overrides["broker"] = broker
    ctx.obj = Settings().model_copy(update=overrides) if overrides else Settings()


# --- ingest -------------------------------------------------------------------------------------

@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", default="auto",
              type=click.Choice(["auto", "dsh", *FORMAT_NAMES]),
              help="Source format; auto detects per file.")
@json_option
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, paths: Sequence[Path], fmt: str, as_json: bool) -> None:
    """Ingest session logs (files or directories): native JSONL/zstd, or any supported agent's."""
    with open_recall(ctx) as recall:
        if console.is_terminal and not as_json:
            with Progress(TextColumn("ingesting"), BarColumn(), MofNCompleteColumn(),
                          console=err_console, transient=True) as bar:
                task = bar.add_task("ingest", total=None)
                report = recall.ingest(paths, fmt=fmt, progress=lambda done, total: bar.update(
                    task, completed=done, total=total))
        else:
            report = recall.ingest(paths, fmt=fmt)
    data = report.to_json()
    if as_json:
        emit_json(data)
        return
    console.print(f"{data['files']} files ({data['unchanged']} unchanged), {data['sessions']} "
                  f"sessions, {data['eventsAdded']} events added, {data['duplicateLines']} "
                  f"duplicates, {data['rejected']} rejected", highlight=False)
    for code, count in sorted(data["rejectedByCode"].items()):
        console.print(f"  parked {count} × {code} (see `recall dead-letters`)", highlight=False)
    for path in data["rewritten"]:
        console.print(f"  [yellow]rewritten source not merged:[/yellow] {path}", highlight=False)


# --- search -------------------------------------------------------------------------------------

def iso_to_ms(value: str) -> int:
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp() * 1000)


def ms_to_iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def event_filter_options(func: F) -> F:
    options = [
        click.option("--surface", "surfaces", multiple=True,
                     type=click.Choice(["current", "shadowed", "log-only"]),
                     help="Only events on this surface (repeatable)."),
        click.option("--type", "types", multiple=True, help="Only this event type (repeatable)."),
        click.option("--since", help="Events at or after this ISO time."),
        click.option("--until", help="Events at or before this ISO time."),
        click.option("--limit", type=int, help="Page size (default 20, max 100)."),
        click.option("--cursor", help="nextCursor of the previous page."),
        click.option("--request", "request_file", type=click.File("rb"),
                     help="The full request JSON (SPEC 3.2, camelCase); '-' reads stdin."),
        click.option("--substring", is_flag=True, help="Substring (trigram) matching."),
        click.option("--snapshot", is_flag=True,
                     help="Snapshot paging: later pages come from the first page's generation."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_event_request(query: str, surfaces: Sequence[str], types: Sequence[str],
                        since: str | None, until: str | None, limit: int | None,
                        cursor: str | None, request_file: Any, substring: bool,
                        snapshot: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    request: dict[str, Any] = orjson.loads(request_file.read()) if request_file else {}
    if query:
        request["query"] = query
    filters: list[dict[str, Any]] = []
    if surfaces:
        filters.append({"kind": "surface", "values": list(surfaces)})
    if types:
        filters.append({"kind": "type", "values": list(types)})
    if since or until:
        filters.append({"kind": "time", "from": iso_to_ms(since) if since else None,
                        "to": iso_to_ms(until) if until else None})
    if limit is not None:
        request["limit"] = limit
    if cursor:
        request["cursor"] = cursor
    if substring:
        request["mode"] = "substring"
    if snapshot:
        request["consistency"] = "snapshot"
    return request, filters


def print_hit(n: int, hit: dict[str, Any], header: dict[str, Any] | None = None) -> None:
    where = f"seq {hit['seq']} | {hit['type']} | {hit['surface']} | {ms_to_iso(hit['time'])}"
    if header is not None:
        console.print(f"[bold]{n}. {header['id']}[/bold]  cwd {header.get('cwd') or '-'}",
                      highlight=False)
        console.print(f"   best match: {where}", highlight=False)
    else:
        console.print(f"[bold]{n}.[/bold] {where}", highlight=False)
    console.print(f"   {hit['snippet']}", highlight=False, markup=False)


@main.command()
@click.argument("query", required=False, default="")
@event_filter_options
@click.option("--session", "sessions", multiple=True, help="Only these session ids.")
@click.option("--cwd", "cwds", multiple=True, help="Only sessions in this working directory.")
@json_option
@click.pass_context
@handle_errors
def search(ctx: click.Context, query: str, surfaces: Sequence[str], types: Sequence[str],
           since: str | None, until: str | None, limit: int | None, cursor: str | None,
           request_file: Any, substring: bool, snapshot: bool, sessions: Sequence[str],
           cwds: Sequence[str], as_json: bool) -> None:
    """Search across sessions: one hit per session, ranked by its best event."""
    request, event_filters = build_event_request(query, surfaces, types, since, until, limit,
                                                 cursor, request_file, substring, snapshot)
    session_filters: list[dict[str, Any]] = []
    if sessions:
        session_filters.append({"kind": "id", "values": list(sessions)})
    if cwds:
        session_filters.append({"kind": "cwd", "values": list(cwds)})
    if session_filters:
        request["sessionFilters"] = [*request.get("sessionFilters", []), *session_filters]
    if event_filters:
        request["eventFilters"] = [*request.get("eventFilters", []), *event_filters]
    with open_recall(ctx) as recall:
        page = recall.search_sessions(request=request)
    if as_json:
        emit_json(page)
        return
    if not page["items"]:
        console.print("No matches.")
    for n, item in enumerate(page["items"], start=1):
        print_hit(n, item["bestMatch"], item["header"])
    if "nextCursor" in page:
        console.print(f"more: --cursor {page['nextCursor']}", highlight=False)


@main.command()
@click.argument("session_id")
@click.argument("query", required=False, default="")
@event_filter_options
@json_option
@click.pass_context
@handle_errors
def events(ctx: click.Context, session_id: str, query: str, surfaces: Sequence[str],
           types: Sequence[str], since: str | None, until: str | None, limit: int | None,
           cursor: str | None, request_file: Any, substring: bool, snapshot: bool,
           as_json: bool) -> None:
    """Search the events of one session."""
    request, filters = build_event_request(query, surfaces, types, since, until, limit, cursor,
                                           request_file, substring, snapshot)
    request["sessionId"] = session_id
    if filters:
        request["filters"] = [*request.get("filters", []), *filters]
    with open_recall(ctx) as recall:
        page = recall.search_events(request=request)
    if as_json:
        emit_json(page)
        return
    console.print(f"[bold]{page['session']['id']}[/bold]", highlight=False)
    if not page["items"]:
        console.print("No matches.")
    for n, hit in enumerate(page["items"], start=1):
        print_hit(n, hit)
    if "nextCursor" in page:
        console.print(f"more: --cursor {page['nextCursor']}", highlight=False)


# --- reads --------------------------------------------------------------------------------------

@main.command()
@json_option
@click.pass_context
@handle_errors
def sessions(ctx: click.Context, as_json: bool) -> None:
    """List sessions, newest first."""
    with open_recall(ctx) as recall:
        listing = recall.list_sessions()
    if as_json:
        emit_json(listing)
        return
    table = Table("id", "created", "cwd", "parent", "live")
    for item in listing:
        h = item["header"]
        table.add_row(h["id"], ms_to_iso(h["createdAt"]), h.get("cwd") or "-",
                      h.get("parentSession") or "-", "yes" if item["live"] else "no")
    console.print(table)


@main.command()
@click.argument("session_id")
@json_option
@click.pass_context
@handle_errors
def surface(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """The current surface of a session: what its model sees, in model order."""
    with open_recall(ctx) as recall:
        result = recall.read_surface(session_id)
    if as_json:
        emit_json(result)
        return
    console.print(f"[bold]{session_id}[/bold] captured through seq "
                  f"{result['capturedThroughSeq']}", highlight=False)
    for event in result["events"]:
        console.print(f"  seq {event['seq']} {event['type']}", highlight=False)


@main.command()
@click.argument("session_id")
@click.argument("seq", type=int)
@click.option("--before", type=int, default=0, help="Events before the target (max 50).")
@click.option("--after", type=int, default=0, help="Events after the target (max 50).")
@json_option
@click.pass_context
@handle_errors
def show(ctx: click.Context, session_id: str, seq: int, before: int, after: int,
         as_json: bool) -> None:
    """Read one event (complete JSON) with a window of neighbours."""
    with open_recall(ctx) as recall:
        result = recall.read_event(session_id, seq, before=before, after=after)
    if as_json:
        emit_json(result)
        return
    for entry in result["before"]:
        console.print(f"- seq {entry['event']['seq']} | {entry['event']['type']} | "
                      f"{entry['surface']}", highlight=False)
    target = result["event"]
    console.print(f"[bold]seq {target['event']['seq']} | {target['event']['type']} | "
                  f"{target['surface']}[/bold]", highlight=False)
    console.print(orjson.dumps(target["event"], option=orjson.OPT_INDENT_2).decode(),
                  markup=False, highlight=False)
    for entry in result["after"]:
        console.print(f"- seq {entry['event']['seq']} | {entry['event']['type']} | "
                      f"{entry['surface']}", highlight=False)


@main.command()
@click.argument("session_id")
@click.argument("seq", type=int, required=False)
@json_option
@click.pass_context
@handle_errors
def trace(ctx: click.Context, session_id: str, seq: int | None, as_json: bool) -> None:
    """Lineage of a session, or the replacement/citation trace of one event."""
    with open_recall(ctx) as recall:
        result = (recall.trace_session(session_id) if seq is None
                  else recall.trace_event(session_id, seq))
    if as_json:
        emit_json(result)
        return
    console.print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), markup=False,
                  highlight=False)


@main.command("dead-letters")
@json_option
@click.pass_context
@handle_errors
def dead_letters(ctx: click.Context, as_json: bool) -> None:
    """Rejected input, parked with its original bytes and a reason code."""
    from streams.store import DeadLetters

    settings: Settings = ctx.obj
    parked = DeadLetters(Path(settings.data_dir) / "dead-letter.jsonl").read()
    if as_json:
        emit_json(parked)
        return
    for item in parked:
        console.print(f"{item['code']}  {item['source']}:{item['line']}  {item['reason']}",
                      highlight=False, markup=False)
    console.print(f"{len(parked)} parked records")


# --- index jobs ---------------------------------------------------------------------------------

@contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich bar on a terminal; nothing when piped or with --json."""
    if not enabled or not err_console.is_terminal:
        yield None
        return
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err_console,
                  transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@main.group()
def index() -> None:
    """Inspect the index: digest, per-shard stats, integrity."""


@index.command()
@json_option
@click.pass_context
@handle_errors
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
@handle_errors
def stats(ctx: click.Context, as_json: bool) -> None:
    """Per-shard rows, bytes, generation and integrity."""
    from indexer.maintenance import check_integrity, shard_stats

    with open_recall(ctx.find_root()) as recall:
        runtime = getattr(recall.backend, "runtime", None)
        if runtime is None:
            raise RecallError("index stats reads shard files on this machine",
                              code="RECALL_UNSUPPORTED_HERE",
                              hint="run it with --data-dir set to a worker's RECALL_DATA_DIR/"
                              "kafka-index host, or use `recall index digest` over Kafka")
        rows = shard_stats(runtime.shards)
        problems = check_integrity(runtime.shards)
    for row in rows:
        row["problems"] = problems.get(row["shard"], [])
    if as_json:
        emit_json(rows)
        return
    table = Table("shard", "sessions", "events", "documents", "bytes", "generation", "problems")
    for row in rows:
        table.add_row(str(row["shard"]), str(row["sessions"]), str(row["events"]),
                      str(row["documents"]), str(row["bytes"]), str(row["generation"]),
                      "; ".join(row["problems"]) or "ok")
    console.print(table)


def _job(ctx: click.Context, name: str, as_json: bool) -> None:
    with open_recall(ctx) as recall, progress_bar(name, not as_json) as progress:
        result = getattr(recall, name)(progress)
    if as_json:
        emit_json(result)
        return
    console.print(f"{name}: generation {result['generation']} is live ({result['eventsIndexed']} "
                  f"events indexed); digest {result['digest']}", highlight=False)


@main.command()
@json_option
@click.pass_context
@handle_errors
def reindex(ctx: click.Context, as_json: bool) -> None:
    """Build a new index generation from the log beside the live one, then swap atomically."""
    _job(ctx, "reindex", as_json)


@main.command()
@json_option
@click.pass_context
@handle_errors
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
    from streams.kafka.worker import ROLES, run_worker

    settings: Settings = ctx.obj
    if not settings.broker:
        raise click.UsageError("set --broker or RECALL_BROKER (e.g. kafka://127.0.0.1:9092)")
    run_worker(settings, list(roles) or list(ROLES), loglevel=loglevel)


# --- references ---------------------------------------------------------------------------------

def parse_source(value: str) -> dict[str, str]:
    session_id, sep, label = value.partition("=")
    return {"sessionId": session_id, "label": label} if sep else {"sessionId": session_id}


@main.command()
@click.option("--target", required=True, help="The session the message is for.")
@click.option("--message", required=True, help="The person's message; may hold @[label](uri).")
@click.option("--source", "sources", multiple=True, help="ID[=LABEL] of a session to reference.")
@click.option("--dry-run", is_flag=True, help="Prepare and print; append nothing.")
@click.option("--message-id", help="Id of the readable message (default: a new uuid).")
@json_option
@click.pass_context
@handle_errors
def reference(ctx: click.Context, target: str, message: str, sources: Sequence[str],
              dry_run: bool, message_id: str | None, as_json: bool) -> None:
    """Pull frozen snapshots of other sessions into TARGET as [context, message]."""
    with open_recall(ctx) as recall:
        result = recall.prepare_reference(target, message,
                                          references=[parse_source(s) for s in sources],
                                          dry_run=dry_run, message_id=message_id)
    if as_json:
        emit_json(result)
        return
    context = result.get("additionalContext")
    if context is not None:
        console.print(context["content"][0]["text"], markup=False, highlight=False)
    console.print(f"message: {result['content'][0].get('text', '')}", markup=False,
                  highlight=False)
    if "appended" in result:
        console.print(f"appended to {target} at seqs {result['appended']}", highlight=False)


@main.command()
@click.option("--target", required=True, help="The session that would reference.")
@click.argument("query", required=False, default="")
@click.option("--limit", type=int, help="How many candidates (default 50).")
@json_option
@click.pass_context
@handle_errors
def candidates(ctx: click.Context, target: str, query: str, limit: int | None,
               as_json: bool) -> None:
    """Sessions TARGET could reference: same workspace first, with mention strings."""
    with open_recall(ctx) as recall:
        rows = recall.list_candidates(target, query, limit)
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        console.print(f"{row['label']}  {row.get('cwd') or '-'}  {row['mention']}",
                      markup=False, highlight=False)


# --- demo ---------------------------------------------------------------------------------------

@main.command()
@json_option
@click.option("--keep", type=click.Path(path_type=Path),
              help="Use this data dir (kept) instead of a temporary one.")
def demo(as_json: bool, keep: Path | None) -> None:
    """Run the whole job on bundled sample sessions in a temporary data dir."""
    from streams.demo import run_demo

    run_demo(console, as_json=as_json, data_dir=keep)


# --- mcp ----------------------------------------------------------------------------------------

@main.command("mcp")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP (bearer token required) instead of stdio.")
@click.option("--session", "session_id", envvar="RECALL_MCP_SESSION",
              help="The calling agent's session id [env RECALL_MCP_SESSION].")
@click.option("--cwd", envvar="RECALL_MCP_CWD",
              help="The caller's workspace; default: the client's first file:// root "
                   "[env RECALL_MCP_CWD].")
@click.option("--max-search-results", type=click.IntRange(min=1), default=100,
              envvar="RECALL_MCP_MAX_SEARCH_RESULTS", help="Cap on results per search call.")
@click.option("--search-timeout-ms", type=click.IntRange(min=1, max=2_147_483_647),
              default=30_000, envvar="RECALL_MCP_SEARCH_TIMEOUT_MS",
              help="Deadline of one search call.")
@click.pass_context
@handle_errors
def mcp(ctx: click.Context, http: str | None, session_id: str | None, cwd: str | None,
        max_search_results: int, search_timeout_ms: int) -> None:
    """Serve the session tools to an agent host over MCP (stdio, or --http HOST:PORT)."""
    from streams.mcp.server import ServerOptions, normalize_cwd, parse_http, serve

    if http is not None:
        try:
            parse_http(http)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--http") from exc
    options = ServerOptions(session_id=session_id or None, cwd=normalize_cwd(cwd),
                            max_search_results=max_search_results,
                            search_timeout_ms=search_timeout_ms)
    settings: Settings = ctx.obj
    with open_recall(ctx) as recall:
        serve(recall, options, http=http, data_dir=Path(settings.data_dir))


if __name__ == "__main__":  # pragma: no cover
    main()
