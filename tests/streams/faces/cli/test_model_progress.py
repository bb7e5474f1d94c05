"""The meaning model's one-off preparation draws a bar on a terminal (from its first report to
its last) and nothing when stderr is not one."""

from __future__ import annotations

import io

from rich.console import Console

from streams.faces.cli.progress import model_progress


def test_a_terminal_shows_the_preparation_until_it_is_done() -> None:
    out = io.StringIO()
    report = model_progress(Console(file=out, force_terminal=True, width=100))
    assert report is not None
    report(512, 2048)
    report(2048, 2048)
    assert "preparing the meaning model (once per machine)" in out.getvalue()
    report(1, 10)  # (a later distillation in the same process draws a bar of its own)
    report(10, 10)
    assert out.getvalue().count("preparing the meaning model") >= 2


def test_nothing_is_drawn_when_stderr_is_not_a_terminal() -> None:
    assert model_progress(Console(file=io.StringIO(), force_terminal=False)) is None
