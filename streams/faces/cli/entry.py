"""The `recall` command's entry point (pyproject.toml's [project.scripts], `python -m streams`).

A short read (streams/faces/cli/fast.py) allocates little and exits: the cyclic collector's
passes over the objects its imports create would only cost it time, so the collector is off
from before those imports. The full CLI (a watcher, a worker) turns it back on.
"""

import gc

gc.disable()

from streams.faces.cli.fast import main  # noqa: E402  (after the collector is off)

__all__ = ["main"]
