"""Presentation edge: progress of long commands, on a terminal's stderr only (quiet when piped).

Ingest reports files done; the bar turns that into bytes (each file's size on disk, in the order
ingest walks them), so it can show bytes, a rate and the time left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from streams.facade import log_files

if TYPE_CHECKING:
    from rich.console import Console

Report = Callable[[int, int], None]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@contextmanager
def ingest_progress(console: Console, paths: Sequence[Path],
                    enabled: bool) -> Iterator[Report | None]:
    """A `progress(files_done, files_total)` callback drawing bytes, rate and ETA on a
    terminal; None when not enabled or not a terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    sizes = [_size(p) for p in log_files(paths)]
    done_bytes = [0]
    for size in sizes:
        done_bytes.append(done_bytes[-1] + size)
    with Progress(TextColumn("ingesting"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[files]}"), console=console,
                  transient=True) as bar:
        task = bar.add_task("ingest", total=done_bytes[-1] or None, files="")

        def report(done: int, total: int) -> None:
            at = done_bytes[min(done, len(sizes))]
            bar.update(task, completed=at, files=f"{done}/{total} files")

        yield report


@contextmanager
def count_progress(console: Console, label: str, enabled: bool) -> Iterator[Report | None]:
    """A bar of `done/total` items on a terminal; None when not enabled or not a terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
