"""Entry point for newcomers: `recall demo` runs the whole job on bundled sample sessions."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from projections import classify_surfaces, extract_text, model_transcript, parse_log
from projections.codec import dumps, dumps_pretty
from projections.errors import MissingExtra
from streams.facade import Recall

CI_SESSION = "ci-billing-2025-11-24"
FOLLOWUP_SESSION = "ci-followup-2025-12-01"
QUESTION = "what was the stack trace of that CI error last time?"


def sample_dir() -> Path:
    return Path(str(resources.files("streams") / "samples"))


def _surfaces_table(events: list[dict[str, Any]]) -> Table:
    table = Table("seq", "type", "surface", "indexed text (first line)", title=CI_SESSION)
    for event, surface in zip(events, classify_surfaces(events), strict=True):
        text = extract_text(event).split("\n", 1)[0][:60]
        style = {"current": "green", "shadowed": "yellow"}.get(surface.value, "dim")
        table.add_row(str(event["seq"]), event["type"], f"[{style}]{surface.value}[/{style}]",
                      text)
    return table


def program() -> str:
    """How to call recall again from here: `recall` when it is on PATH, else the path it was
    run by (`make demo` runs .venv/bin/recall without activating the venv)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if shutil.which("recall") or Path(argv0).name != "recall" or not Path(argv0).is_file():
        return "recall"
    return shlex.quote(os.path.relpath(argv0) if not argv0.startswith("/") else argv0)


def ui_command(data_dir: Path | None) -> str:
    """The command that opens the demo's sessions in a browser (a kept data dir, or one the
    command keeps first)."""
    recall = program()
    if data_dir is not None:
        return f"{recall} --data-dir {shlex.quote(str(data_dir))} ui"
    return f"{recall} demo --keep /tmp/recall-demo && {recall} --data-dir /tmp/recall-demo ui"


def run_demo(console: Console, *, as_json: bool = False, data_dir: Path | None = None) -> None:
    """Ingest the samples, show surfaces, search for the old stack trace, reference it."""
    with tempfile.TemporaryDirectory(prefix="recall-demo-") as tmp:
        root = data_dir or Path(tmp)
        with Recall.open(root) as recall:
            summary = _run(recall, console, as_json=as_json)
    summary["ui"] = ui_command(data_dir)
    if as_json:
        console.file.write(dumps_pretty(summary) + "\n")
    else:
        console.print("\n[bold]Then see it in a browser[/bold] (the greyed stack trace, the "
                      "search hit that finds it, the reference preview):")
        console.print(f"  {summary['ui']}", markup=False, highlight=False, soft_wrap=True)
        if importlib.util.find_spec("jinja2") is None:
            # `make demo` installs the package alone; the web page is the ui extra.
            console.print(f"  (first: {MissingExtra('ui', 'jinja2').hint})", markup=False,
                          highlight=False, soft_wrap=True)


def _run(recall: Recall, console: Console, *, as_json: bool) -> dict[str, Any]:
    say = (lambda *a, **k: None) if as_json else console.print
    samples = sample_dir()
    report = recall.ingest([samples]).to_json()
    say(f"[bold]1. Ingest[/bold] {report['files']} sample logs → {report['sessions']} sessions, "
        f"{report['eventsAdded']} events (store, dead letters and 8 FTS5 shards in a temporary "
        "data dir)\n")

    log = parse_log((samples / "ci-billing.jsonl").read_bytes())
    say("[bold]2. One fold, three surfaces.[/bold] The CI session's log, as fold_surface tags it:")
    say(_surfaces_table(log.events))
    transcript = model_transcript(log.events)
    say("\nThe model's transcript after compaction (current surface only):")
    for message in transcript:
        text = " ".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
        say(f"  [{message['role']}] {text[:110]}", markup=False, highlight=False)

    say(f'\n[bold]3. Ask:[/bold] "{QUESTION}"  →  recall search "Traceback" --cwd /home/dev/shop')
    page = recall.search_sessions("Traceback", session_filters=[
        {"kind": "cwd", "values": ["/home/dev/shop"]}])
    hit = page["items"][0]["bestMatch"]
    say(f"  session {hit['sessionId']}  seq {hit['seq']}  {hit['type']}  surface "
        f"[yellow]{hit['surface']}[/yellow]", highlight=False)
    say(f"  snippet: {hit['snippet']}", markup=False, highlight=False)
    full = recall.read_event(hit["sessionId"], hit["seq"])
    trace_text = extract_text(full["event"]["event"])
    say("  The full event (recall show SESSION SEQ) still holds the stack trace the model no "
        "longer sees:")
    for line in trace_text.splitlines()[7:13]:
        say(f"    {line}", markup=False, highlight=False)
    trace = recall.trace_event(hit["sessionId"], hit["seq"])
    say(f"  trace: replaced by seq {trace['replacedBy']} (pruned), chain "
        f"{trace['replacementChain']} (then compacted)")

    say('\n[bold]4. Within the session:[/bold] recall events ci-billing-2025-11-24 "EUR"')
    events_page = recall.search_events(CI_SESSION, "EUR")
    for item in events_page["items"][:4]:
        say(f"  seq {item['seq']:>2} {item['type']:<18} {item['surface']:<9} "
            f"{item['snippet'][:70]}", markup=False, highlight=False)

    say(f"\n[bold]5. Reference it[/bold] from the new session {FOLLOWUP_SESSION}:")
    prepared = recall.prepare_reference(
        FOLLOWUP_SESSION, "Here is the earlier CI session; is this the same failure?",
        references=[{"sessionId": CI_SESSION, "label": "CI billing fix"}],
        message_id="demo-message-1")
    context = prepared["additionalContext"]
    say(f"  appended [context, message] at seqs {prepared['appended']}; provenance "
        f"{dumps(context['source']['references'][0]).decode()}", markup=False,
        highlight=False)
    say("  the context message the model receives:", highlight=False)
    say(context["content"][0]["text"], markup=False, highlight=False)
    prog = program()
    say(f"\nNext: point it at your own logs, e.g. `{prog} ingest ~/.claude/projects "
        f"~/.codex/sessions`, then `{prog} search \"your error\"`.")
    return {"ingest": report, "hit": hit, "withinSession": events_page["items"],
            "reference": prepared}
