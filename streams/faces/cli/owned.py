"""Entry points for sessions recall writes: `recall create` and `recall append` (PROTOCOL §4.7, ours)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from projections.codec import loads_lossless
from projections.errors import InputRejected, UsageError
from streams import facade
from streams.faces.cli.common import TEXT, emit_json, json_option, open_recall, say
from streams.faces.textsafe import visible


@click.command("create")
@click.option("--id", "session_id", type=TEXT, help="The new session's id (default: a new one).")
@click.option("--cwd", type=TEXT, help="Its workspace (absolute path).")
@click.option("--parent", type=TEXT, help="The session it continues (lineage).")
@json_option
@click.pass_context
def create(ctx: click.Context, session_id: str | None, cwd: str | None, parent: str | None,
           as_json: bool) -> None:
    """Create a session that recall writes; references to it are appended to it."""
    with open_recall(ctx) as recall:
        header = recall.create_session(session_id, cwd=cwd, parent_session=parent)
    if as_json:
        emit_json(header)
        return
    say("created ", visible(header["id"]), " (written by recall)")


def _read_events(source: Any) -> list[Any]:
    """Events from JSON lines (blank lines skipped), each read losslessly."""
    events = []
    for number, line in enumerate(source.read().split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            events.append(loads_lossless(line))
        except InputRejected as exc:
            raise UsageError(f"--events line {number}: {exc.message}") from None
    return events


@click.command("append")
@click.argument("session_id", type=TEXT)
@click.option("--message", "messages", multiple=True, type=TEXT,
              help="A person's message to append as user/message (repeatable).")
@click.option("--events", "events_file", type=click.File("rb"),
              help="JSON lines of events to append ({type, data, surfaceOp?, …}; - for stdin).")
@json_option
@click.pass_context
def append(ctx: click.Context, session_id: str, messages: Sequence[str],
           events_file: Any, as_json: bool) -> None:
    """Append messages or events to a session recall writes (refused for any other)."""
    events = [facade.user_message(text) for text in messages]
    if events_file is not None:
        events.extend(_read_events(events_file))
    if not events:
        raise click.UsageError("give --message TEXT or --events FILE")
    with open_recall(ctx) as recall:
        result = recall.append_events(session_id, events)
    if as_json:
        emit_json(result)
        return
    say("appended to ", visible(session_id), f" at seqs {result['seqs']}")
    sys.stdout.flush()
