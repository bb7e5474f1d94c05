"""Transport and entry points: Kafka/faust, the embedded runtime, the query worker and the CLI."""

from __future__ import annotations

__all__ = ["Recall", "build_app"]


def __getattr__(name: str) -> object:
    # Lazy, so importing one submodule (e.g. streams.core.settings) never pulls in the runtimes
    # (nor typing: `recall search` turns the cyclic collector off before its imports).
    if name == "Recall":
        from streams.facade import Recall

        return Recall
    if name == "build_app":
        from streams.runtime.kafka.app import build_app

        return build_app
    raise AttributeError(name)
