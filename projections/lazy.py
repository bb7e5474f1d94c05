"""Package edge: the names a package re-exports, each imported on its first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_getattr(package: MutableMapping[str, Any],
                 where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `where[name]` on first use and keeps the value in
    `package` (the module's globals), so later lookups never reach it again."""
    module = package["__name__"]

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        package[name] = value
        return value

    return getattr_
