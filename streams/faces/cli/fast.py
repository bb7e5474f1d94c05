"""The `recall` command's entry point: `recall search` and `recall sessions` in their common
forms answered without loading the full CLI (click, rich, pydantic); everything else, and any
case this path cannot vouch for, goes to the full CLI (streams/faces/cli/main.py) unchanged.

The fast path takes only these command lines (options in any order, `--opt=value` too):

    recall [--data-dir D] search WORD... [--json] [--limit N]
    recall [--data-dir D] sessions [--json] [--limit N] [--cwd C] [--agent A] [--title T]

with no RECALL_BROKER and only the RECALL_* settings the light reader vouches for
(streams/core/envsettings.py). It prints what the full CLI prints, byte for byte, with the same
exit status; it never prints an error: a failure of its own (an unusual index, a query error)
hands the command line to the full CLI, which answers it from the start. It prints plain text
when stdout is not a terminal and the text needs nothing rich does (control characters, wide
characters); otherwise rich prints the same lines the full CLI builds.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from streams.faces.cli.pipes import closed_pipe, make_console

#: The options each command takes on this path: name -> takes a value.
_OPTIONS: dict[str, dict[str, bool]] = {
    "search": {"--json": False, "--limit": True},
    "sessions": {"--json": False, "--limit": True, "--cwd": True, "--agent": True,
                 "--title": True},
}
#: Environment variables that make rich print differently from plain text.
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS",
             "JUPYTER_LINES")
#: Characters besides printable ASCII that the plain writer prints as rich does (one cell).
_PLAIN_EXTRA = "—·…"
_PLAIN = re.compile(f"[\x20-\x7e{_PLAIN_EXTRA}]*")


class Command:
    """A command line of the fast path."""

    def __init__(self, name: str, data_dir: str | None, words: list[str],
                 options: dict[str, str | bool]) -> None:
        self.name, self.data_dir, self.words, self.options = name, data_dir, words, options


def parse(argv: Sequence[str]) -> Command | None:
    """The command line if the fast path takes it, else None."""
    args = list(argv)
    data_dir: str | None = None
    while args and args[0].startswith("--data-dir"):
        head = args.pop(0)
        if head == "--data-dir" and args and data_dir is None and not args[0].startswith("-"):
            data_dir = args.pop(0)
        elif head.startswith("--data-dir=") and data_dir is None:
            data_dir = head[len("--data-dir="):]
        else:
            return None
    if not args or args[0] not in _OPTIONS:
        return None
    name, known = args[0], _OPTIONS[args[0]]
    words: list[str] = []
    options: dict[str, str | bool] = {}
    rest = args[1:]
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            continue
        option, eq, value = arg.partition("=")
        if option not in known or option in options:
            return None
        if known[option]:
            if not eq:
                if not rest or rest[0].startswith("-"):
                    return None
                value = rest.pop(0)
            options[option] = value
        elif eq:
            return None
        else:
            options[option] = True
    if (name == "search") != bool(words):  # search needs words; sessions takes none
        return None
    for text in [*words, *(v for v in options.values() if isinstance(v, str)),
                 data_dir or ""]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    limit = options.get("--limit")
    if limit is not None and not (isinstance(limit, str) and re.fullmatch(r"[1-9][0-9]{0,8}",
                                                                          limit)):
        return None
    return Command(name, data_dir, words, options)


def _full() -> None:
    from streams.faces.cli.main import main as full

    full()  # reads sys.argv as it does when it is the entry point


def _plain(lines: list[str]) -> bool:
    """Whether printing `lines` as they are is what rich prints."""
    if sys.stdout.isatty() or any(os.environ.get(name) is not None for name in _RICH_ENV):
        return False
    text = "".join(lines)
    if text.isascii() and text.isprintable():  # printable ASCII: two scans in C, no pattern
        return True
    return _PLAIN.fullmatch(text) is not None  # one character class: one scan


def _search(command: Command, reader: Any) -> tuple[Any, list[list[tuple[str, str]]]]:
    from streams.requests import SearchOptions, search_request

    limit = command.options.get("--limit")
    options = SearchOptions(query=" ".join(command.words) or None,
                            limit=int(limit) if isinstance(limit, str) else None)
    page = reader.search_sessions(search_request(options, {}))
    if command.options.get("--json"):
        return page, []
    from streams.faces.views import session_hit_parts

    lines: list[list[tuple[str, str]]] = []
    if not page["items"]:
        lines.append([("No matches.", "")])
    for n, item in enumerate(page["items"], start=1):
        lines += session_hit_parts(n, item)
    if "nextCursor" in page:
        from streams.faces.textsafe import visible

        lines.append([("more: --cursor ", ""), (visible(page["nextCursor"]), "")])
    return page, lines


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """streams/faces/cli/common.py's print_columns, for cells of one-cell characters."""
    line = "  ".join(f"%-{max(map(len, column))}s" for column in zip(*rows, strict=True))
    return [(line % row).rstrip() for row in rows]


def _sessions(command: Command, reader: Any) -> tuple[Any, list[str] | None]:
    limit = command.options.get("--limit")
    listing = reader.list_sessions(
        cwd=command.options.get("--cwd"), agent=command.options.get("--agent"),
        title=command.options.get("--title"), limit=int(limit) if isinstance(limit, str) else None)
    if command.options.get("--json") or not listing:
        return listing, None
    from streams.faces import views

    rows = [views.SESSION_COLUMNS, *views.session_rows(listing)]
    if not _plain(list(map("".join, rows))):
        return listing, None  # rich measures and prints them
    return listing, _columns(rows)


def _write(text: str) -> int:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()
    return 0


def run(argv: Sequence[str]) -> int | None:
    """Answer `argv` on the fast path: the exit status, or None to take the full CLI."""
    command = parse(argv)
    if command is None:
        return None
    from streams.core.envsettings import light_settings

    if any(key.upper() == "RECALL_BROKER" for key in os.environ):
        return None
    settings = light_settings(data_dir=command.data_dir)
    if settings is None:
        return None
    from streams.facade_read import open_reader

    try:
        reader = open_reader(settings, search=command.name == "search")
    except Exception:
        return None
    if reader is None:
        return None
    try:
        if command.name == "search":
            page, lines = _search(command, reader)
            result: Any = page
        else:
            result, columns = _sessions(command, reader)
    except Exception:  # the full CLI reports it, with its code and next step
        return None
    finally:
        reader.close()
    if command.options.get("--json"):
        from projections.codec import dumps_pretty

        return _write(dumps_pretty(result) + "\n")
    if command.name == "search":
        texts = ["".join(text for text, _ in parts) for parts in lines]
        if _plain(texts):
            return _write("".join(line + "\n" for line in texts))
        return _rich_lines(lines)
    if not result:
        return _write("No sessions.\n")  # printed by rich as is: plain text
    if columns is not None:
        return _write("\n".join(columns) + "\n")
    return None  # rich's cell widths: the full CLI prints it


def _rich_lines(lines: list[list[tuple[str, str]]]) -> int:
    """The lines as the full CLI's console prints them (a terminal, or text rich changes)."""
    from rich.text import Text

    console = make_console()
    try:
        for parts in lines:
            console.print(Text.assemble(*parts), soft_wrap=True)
        sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()
    return 0


def main() -> None:
    import gc

    from projections.codec import for_short_process

    argv = sys.argv[1:]
    for_short_process()
    # A read allocates little and then exits: the cyclic collector's passes over the modules
    # it imports would only cost time (the entry point, streams/faces/cli/entry.py, turned it
    # off before them). The full CLI (a watcher, a worker) runs with it.
    gc.disable()
    try:
        status = run(argv)
    except BaseException:
        gc.enable()
        raise
    if status is None:
        gc.enable()
        _full()
        return
    _exit(status)  # with the collector still off: enabled now, it would run once more here


def _exit(status: int) -> NoReturn:
    """Exit as the interpreter would, without its teardown (unloading every module a read
    imported costs a short command a good part of its run): the answer is written, the
    index closed, and what is left of an exit is done here."""
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # (a closed pipe): the interpreter's own exit reports it
        sys.exit(status)
    # (none is left running; if one were, it is waited for; without threading, none started)
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        sys.exit(status)
    atexit._run_exitfuncs()
    os._exit(status)
