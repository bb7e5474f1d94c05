"""Face for people and scripts: the CLI's consoles, and a closed output pipe
(`recall sessions | head -1`) ending a command quietly. Light: the fast read path imports it."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

#: A shell's status for a process that SIGPIPE ended: what `yes | head -1` reports for `yes`.
EXIT_CLOSED_PIPE = 128 + 13


def closed_pipe() -> int:
    """The reader of stdout went away: stdout pointed at /dev/null (so the interpreter's own
    flush at exit has nothing to complain about) and the status a shell reports."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CLOSED_PIPE


def make_console(*, stderr: bool = False) -> Console:
    """A console that never breaks a line itself (piped: one record per line, full ids; a
    terminal wraps long lines, so a copied id or cursor stays whole), and that meets a closed
    pipe with BrokenPipeError, as a plain write does, instead of rich's SystemExit(1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(stderr=stderr, highlight=False, soft_wrap=True)
