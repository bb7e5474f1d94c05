"""Stage 0 of the flow, the JSON edge: bytes → values without silent loss, or a coded rejection.

orjson is fast but forgiving in ways a log of record must not be: integers past ±2^53 survive in
Python but not in JavaScript readers (and past 2^64 orjson turns them into floats), `1e400`
becomes infinity, a repeated key keeps its last value, and nesting deeper than orjson can write
back (255 levels) parses but then fails at the store. So every line is parsed by orjson, and
checked; a line orjson would not write back byte for byte (duplicate keys, infinities, numbers it
would round, other escapes) is parsed again by the standard library with hooks that see every
key and every number, so the verdict is exact, not heuristic. Rules (stable codes):

- not UTF-8 → INGEST_INVALID_UTF8; not JSON → INGEST_MALFORMED_JSON;
- an integer outside ±(2^53 − 1), a number that is not finite, a key repeated in one object →
  INGEST_LOSSY_JSON;
- nesting deeper than MAX_JSON_DEPTH arrays/objects → INGEST_TOO_DEEP.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from projections.errors import (
    INGEST_INVALID_UTF8,
    INGEST_LOSSY_JSON,
    INGEST_MALFORMED_JSON,
    INGEST_TOO_DEEP,
    InputRejected,
)

#: Deepest accepted nesting of arrays and objects in one line. Real logs nest a handful of levels
#: (an importer wraps a record in 3 more); orjson cannot serialize past 255, so the store could
#: not write such a line back.
MAX_JSON_DEPTH = 128
#: JavaScript's Number.MAX_SAFE_INTEGER: the largest integer every reader of the log agrees on.
MAX_SAFE_INTEGER = 2**53 - 1



def loads(line: bytes) -> Any:
    """Parse one JSON text losslessly; raises InputRejected with one of the codes above."""
    return loads_canonical(line)[0]


def loads_canonical(line: bytes) -> tuple[Any, bool]:
    """`loads`, and whether `line` is exactly orjson's compact writing of the value (then the
    line's bytes ARE the value's serialization: callers keep them instead of dumping again, and
    every number in it is a safe integer or a finite float)."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise InputRejected(f"invalid UTF-8: {uexc}", code=INGEST_INVALID_UTF8) from None
        if "recursion" in str(exc).lower() or "depth limit" in str(exc):
            raise InputRejected(f"nested deeper than {MAX_JSON_DEPTH} levels",
                                code=INGEST_TOO_DEEP) from None
        if "infinity" in str(exc):
            raise InputRejected(f"a number overflows a double: {exc}",
                                code=INGEST_LOSSY_JSON) from None
        raise InputRejected(f"malformed JSON: {exc}", code=INGEST_MALFORMED_JSON) from None
    if _writes_back(value, line):
        if _may_be_deep(line):
            check_value(value)
        return value, True
    return _strict_loads(line), False


def check_value(value: Any) -> None:
    """Raise InputRejected if `value` nests past MAX_JSON_DEPTH, holds an unsafe integer or a
    non-finite float (for values made in code, e.g. by an importer, before they are stored)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_JSON_DEPTH:
                raise InputRejected(f"nested deeper than {MAX_JSON_DEPTH} levels",
                                    code=INGEST_TOO_DEEP)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            if depth > MAX_JSON_DEPTH:
                raise InputRejected(f"nested deeper than {MAX_JSON_DEPTH} levels",
                                    code=INGEST_TOO_DEEP)
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        elif isinstance(item, int):
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                raise InputRejected(f"integer {_short(item)} is outside ±(2^53 − 1); it would "
                                    "not survive every reader", code=INGEST_LOSSY_JSON)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InputRejected("a number is not finite (overflows a double)",
                                code=INGEST_LOSSY_JSON)


def _short(number: int) -> str:
    text = str(number) if abs(number) < 10**200 else f"of {len(str(abs(number)))} digits"
    return text if len(text) <= 40 else text[:37] + "…"


def _may_be_deep(line: bytes) -> bool:
    # Depth can only exceed the bound if the line holds more openers than the bound.
    return line.count(b"{") + line.count(b"[") > MAX_JSON_DEPTH


def _writes_back(value: Any, line: bytes) -> bool:
    """True if orjson writes `value` back as exactly `line`: then no key was repeated (a dict
    cannot hold one twice), no number was rounded or overflowed, and (strict integers) every
    integer is safe, so orjson's reading is the exact one."""
    try:
        return orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER) == line
    except (TypeError, orjson.JSONEncodeError):  # e.g. past orjson's nesting limit
        return False


def _reject_constant(name: str) -> Any:
    raise InputRejected(f"{name} is not a JSON number", code=INGEST_LOSSY_JSON)


def _parse_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise InputRejected(f"number {text[:40]} overflows a double", code=INGEST_LOSSY_JSON)
    return number


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > 16:  # also keeps int() clear of its 4300-digit limit
        raise InputRejected(f"integer {text[:37]}… is outside ±(2^53 − 1); it would not survive "
                            "every reader", code=INGEST_LOSSY_JSON)
    return int(text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InputRejected(f"key {key[:60]!r} appears twice in one object; which one "
                                    "holds is not defined", code=INGEST_LOSSY_JSON)
            seen.add(key)
    return out


def _strict_loads(line: bytes) -> Any:
    """The slow, exact reading: every object's keys and every number seen by a hook."""
    try:
        value = json.loads(line.decode("utf-8"), object_pairs_hook=_pairs,
                           parse_constant=_reject_constant, parse_float=_parse_float,
                           parse_int=_parse_int)
    except RecursionError:
        raise InputRejected(f"nested deeper than {MAX_JSON_DEPTH} levels",
                            code=INGEST_TOO_DEEP) from None
    except ValueError as exc:  # orjson accepted it, so this is the stdlib's stricter limits
        raise InputRejected(f"malformed JSON: {exc}", code=INGEST_MALFORMED_JSON) from None
    check_value(value)
    return value
