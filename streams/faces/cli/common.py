"""The CLI's shared helpers: its consoles, output and argument types, and the `Recall` a command
opens. Every command module imports them from here (never from main, which registers them)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.text import Text

from projections.codec import dumps_pretty
from streams.core.settings import Settings
from streams.facade import Recall
from streams.faces.cli.pipes import make_console
from streams.faces.textsafe import visible

F = TypeVar("F", bound=Callable[..., Any])
console = make_console()
err_console = make_console(stderr=True)


def emit_json(value: Any) -> None:
    sys.stdout.write(dumps_pretty(value) + "\n")


def say(*parts: str | tuple[str, str]) -> None:
    """Print one line built from plain strings and (text, style) pairs; never markup."""
    console.print(Text.assemble(*parts), soft_wrap=True)


def say_lines(lines: Sequence[Text]) -> None:
    """Print lines built by streams/faces/views.py, each as it is (never wrapped, never markup)."""
    for line in lines:
        console.print(line, soft_wrap=True)


def print_columns(rows: Sequence[Sequence[str]]) -> None:
    """Aligned columns, one line per row, the first row bold. Never wrapped: a cell that wrapped
    would look like a row of its own."""
    sizes = [[cell_len(cell) for cell in row] for row in rows]
    widths = [max(row[i] for row in sizes) for i in range(len(sizes[0]))]
    lines = ["  ".join(cell + " " * (w - n) for cell, n, w in zip(row, size, widths, strict=True))
             .rstrip() for row, size in zip(rows, sizes, strict=True)]
    text = Text("".join(line + "\n" for line in lines))
    text.stylize("bold", 0, len(lines[0]))
    # one print: a print per row costs more than the listing it prints
    console.print(text, soft_wrap=True, end="")


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print machine-readable JSON (camelCase, as docs/PROTOCOL.md).")(func)


class Utf8Text(click.types.StringParamType):
    """A text argument: undecodable bytes on the command line are a usage error, not a crash."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{visible(text.encode('utf-8', 'surrogateescape'))[:80]} is not valid "
                      "UTF-8 text", param, ctx)
        return text


TEXT = Utf8Text()


class LazyChoice(click.Choice[str]):
    """A Choice whose values are read when first needed (parsing, --help), not when the CLI is
    imported: the importers' format names cost every command their import otherwise."""

    def __init__(self, values: Callable[[], Sequence[str]]) -> None:
        self._values = values
        self._loaded: tuple[str, ...] | None = None
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:
        if self._loaded is None:
            self._loaded = tuple(self._values())
        return self._loaded

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:
        self._loaded = tuple(value)


class SafePath(click.Path):
    """click.Path that turns a name the OS cannot even look up (a NUL byte) into a usage error
    instead of a ValueError from os.stat."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r} is not a usable path (it holds a NUL byte)", param, ctx)
        return super().convert(value, param, ctx)


@contextmanager
def open_recall(ctx: click.Context) -> Iterator[Recall]:
    settings: Settings = ctx.obj
    recall = (Recall.connect(settings.broker, settings=settings) if settings.broker
              else Recall.open(settings=settings))
    try:
        yield recall
    finally:
        recall.close()
