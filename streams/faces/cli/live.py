"""Entry points for live agents: `recall watch` (follow growing logs) and `recall hook` (an
agent's hook ingests its own transcript at once)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from projections.codec import dumps
from streams.core.errorlog import as_recall_error, log_exception
from streams.core.settings import Settings
from streams.facade import (
    format_names,
    hook_payload,
    record_hook,
    transcript_files,
    watch_lock,
    watch_roots,
    watcher,
)
from streams.faces.cli.common import (
    LazyChoice,
    SafePath,
    err_console,
    json_option,
    open_recall,
    say,
)
from streams.faces.textsafe import visible


def _printer(as_lines: bool) -> Any:
    def emit(event: dict[str, Any]) -> None:
        if as_lines:
            sys.stdout.write(dumps({"at": int(time.time() * 1000), **event}).decode()
                             + "\n")
            sys.stdout.flush()
        elif event["event"] in ("rewritten", "error", "unreadable"):
            what = event.get("source") or event.get("message") or ""
            err_console.print(Text.assemble((f"{event['event']}: ", "yellow"), visible(what)),
                              soft_wrap=True)
        elif event["event"] == "started":
            err_console.print(Text(f"recall watch: {event['files']} files under "
                                   f"{len(event['roots'])} folders"), soft_wrap=True)
    return emit


@click.command("watch")
@click.argument("paths", nargs=-1, type=SafePath(path_type=Path))
@click.option("--agent", "agents", multiple=True, type=LazyChoice(format_names),
              help="Without PATHs: watch only these agents' default folders.")
@click.option("--debounce-ms", type=click.IntRange(min=10, max=60_000), default=200,
              show_default=True, help="Longest wait that groups changes into one batch.")
@json_option
@click.pass_context
def watch(ctx: click.Context, paths: Sequence[Path], agents: Sequence[str], debounce_ms: int,
          as_json: bool) -> None:
    """Follow agents' log files as they grow and make each new line searchable.

    \b
    Without PATHs: every supported agent's default folders (RECALL_WATCH_PATHS, separated by
    ':', overrides them). Embedded by default; with RECALL_BROKER it publishes to the events
    topic (the fleet shipper). One watcher per data dir; Ctrl-C or SIGTERM stops it cleanly.
    JSON event lines on stdout with --json or when piped, a status line in a terminal.
    """
    settings: Settings = ctx.obj
    roots = list(paths) or watch_roots(agents)
    as_lines = as_json or not sys.stdout.isatty()
    with watch_lock(Path(settings.data_dir)), open_recall(ctx) as recall:
        # Embedded: the ingest itself. Kafka: its ingest too, which publishes only what is new
        # per file (the fleet shipper).
        following = watcher(recall, roots, _printer(as_lines), debounce_ms=debounce_ms)
        following.stop_on_signals()
        if as_lines or not err_console.is_terminal:
            following.run()
            return
        from rich.live import Live

        with Live(Text("recall watch: starting"), console=err_console,
                  refresh_per_second=1, transient=False) as live:
            def refresh() -> None:
                while not following.stop.wait(1.0):
                    live.update(Text(following.status.line(time.monotonic())))

            import threading

            threading.Thread(target=refresh, daemon=True).start()
            following.run()
            live.update(Text(following.status.line(time.monotonic())))
    say(f"stopped: {following.status.events} events in {following.status.batches} batches")


@click.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument("payload", nargs=-1)
@click.option("--lock-timeout-s", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Longest wait for another writer; then the watcher or the next hook ingests.")
@click.option("--verbose", is_flag=True, help="Print what happened on stderr.")
@click.pass_context
def hook(ctx: click.Context, payload: Sequence[str], lock_timeout_s: float,
         verbose: bool) -> None:
    """Ingest the running session's transcript now, from an agent's hook.

    \b
    Claude Code: a command hook (JSON payload on stdin) on SessionStart, Stop, PreCompact and
    SessionEnd. Codex: `notify = ["recall", "hook"]` (the JSON payload is the last argument).
    Records the session's transcript path for `recall mcp`; always exits 0, logs errors to
    <data dir>/log/recall.log, prints nothing on stdout.
    """
    settings: Settings = ctx.obj
    data_dir = Path(settings.data_dir)
    result: dict[str, Any] = {}
    try:
        stdin = b"" if payload else sys.stdin.buffer.read()
        parsed = hook_payload(stdin, payload)
        result = {"sessionId": parsed.session_id, "event": parsed.event,
                  "transcriptPath": str(parsed.transcript) if parsed.transcript else None}
        record_hook(data_dir, parsed)
        if parsed.transcript is not None and parsed.transcript.is_file():
            ctx.obj = settings.model_copy(
                update={"lock_timeout_s": min(settings.lock_timeout_s, lock_timeout_s)})
            with open_recall(ctx) as recall:
                # over Kafka, the shipper: only what neither a watcher nor an earlier hook sent
                report = recall.ingest(transcript_files(parsed.transcript)).to_json()
            result.update(eventsAdded=report["eventsAdded"], parkedLines=report["parkedLines"])
    except Exception as exc:  # a hook must never fail the agent: log, say, exit 0
        error = as_recall_error(exc, data_dir)
        log_exception(exc, data_dir, context="recall hook")
        result["error"] = {"code": error.code, "message": error.message}
    if verbose:
        sys.stderr.write(dumps(result).decode() + "\n")
