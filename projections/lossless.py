"""JSON values that survive a round trip exactly (PROTOCOL §1.2): what an event's `data` may hold."""

from __future__ import annotations

import math
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1


def check_lossless(value: Any, path: str = "data") -> None:
    """Reject values JSON cannot carry exactly (PROTOCOL §1.2): -0, non-finite, unsafe ints, non-JSON types."""
    # Almost every value passes: walk it without building paths, and only when that walk finds
    # something it cannot vouch for, walk again with paths to name the first offender.
    if not _plainly_lossless(value):
        _check_lossless_with_paths(value, path)


def _plainly_lossless(value: Any) -> bool:
    """True if `value` is made only of exact JSON types with lossless numbers; False means
    "look closer" (a failure, or merely a subclass such as an int-valued enum)."""
    stack = [value]
    push = stack.append
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, v in item.items():
                if type(key) is not str:
                    return False
                if type(v) is not str:  # strings (most values) need no visit
                    push(v)
        elif kind is list:
            stack.extend(item)
        elif kind is str or item is None or kind is bool:
            continue
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return False
        elif kind is float:
            if not math.isfinite(item) or (item == 0.0 and math.copysign(1.0, item) < 0):
                return False
        else:
            return False
    return True


def _check_lossless_with_paths(value: Any, path: str) -> None:
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                raise ValueError(f"{where}: integer {item} is outside the safe range")
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{where}: non-finite number")
            if item == 0.0 and math.copysign(1.0, item) < 0:
                raise ValueError(f"{where}: -0 is not lossless JSON")
            continue
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise ValueError(f"{where}: non-string key {k!r}")
                stack.append((v, f"{where}.{k}"))
            continue
        raise ValueError(f"{where}: {type(item).__name__} is not a JSON value")
