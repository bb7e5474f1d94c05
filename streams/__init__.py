"""Transport and entry points: Kafka/faust, the embedded runtime, the query worker and the CLI."""

from __future__ import annotations

# typing.TYPE_CHECKING's value, without importing typing: `recall search` turns the cyclic
# collector off (streams/faces/cli/entry.py) before its imports, and this package comes first
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Recall", "build_app"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing one submodule (e.g. streams.core.settings) never pulls in the runtimes.
    if name == "Recall":
        from streams.facade import Recall

        return Recall
    if name == "build_app":
        from streams.runtime.kafka.app import build_app

        return build_app
    raise AttributeError(name)
