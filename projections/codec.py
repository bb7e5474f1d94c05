"""The one JSON codec: every JSON encode and decode of projections, indexer and streams.

orjson is the engine. Its functions are bound here as they are (`dumps`, `loads`) or through a
C-level `functools.partial` (`dumps_sorted`), so a call costs what a direct orjson call costs; a
wrapper written in Python exists only where a caller would otherwise repeat the same steps
(`dumps_pretty`). ruff's banned-api keeps `orjson` and `json` out of every other module.

A short process (the CLI's read path: one search, one listing) declares itself first
(`for_short_process`): importing orjson costs such a process more than all its JSON work, so
the names it then imports are the standard library's, writing the same bytes and reading the
same values (a value the standard library would write differently, a float say, is still
written by orjson). orjson is imported on the first use of its names, never by importing this
module.

What is here, by the question a caller asks:

- Bytes for a value, bytes back to a value (stores, shards, the wire, state files): `dumps`,
  `dumps_sorted` (keys sorted: a canonical writing, for digests and stable files), `loads`, and
  their errors `JSONDecodeError` / `JSONEncodeError`.
- Text for people to read (CLI `--json`, web pages, MCP): `dumps_pretty`.
- A line of record, without silent loss (stage 0 of the flow): `loads_lossless`,
  `loads_canonical`, `check_value`, with the coded rejections below.
- JavaScript's own JSON, byte for byte (PROTOCOL §4.4 snapshots, `dsh-session:` URIs):
  `js_stringify`, `stringify_tag_safe_json`, `parse_js`.

Lossless reads. orjson is fast but forgiving in ways a log of record must not be: integers past
±2^53 survive in Python but not in JavaScript readers (and past 2^64 orjson turns them into
floats), `1e400` becomes infinity, a repeated key keeps its last value, and nesting deeper than
orjson can write back (255 levels) parses but then fails at the store. So every line is parsed by
orjson, and checked; a line orjson would not write back byte for byte (duplicate keys,
infinities, numbers it would round, other escapes) is parsed again by the standard library with
hooks that see every key and every number, so the verdict is exact, not heuristic. Rules (stable
codes):

- not UTF-8 → INGEST_INVALID_UTF8; not JSON → INGEST_MALFORMED_JSON;
- an integer outside ±(2^53 − 1), a number that is not finite, a key repeated in one object →
  INGEST_LOSSY_JSON;
- nesting deeper than MAX_JSON_DEPTH arrays/objects → INGEST_TOO_DEEP.

JavaScript's JSON. A snapshot is a determinism contract: its bytes are what `JSON.stringify`
writes, which orjson does not (JS prints `1.0` as `1`, `1e+20` as `100000000000000000000`, `1e-6` as
`0.000001` and `-0` as `0`, puts array-index keys first, rounds integers past 2^53, and escapes
lone surrogates that orjson refuses), so that writer is its own code, below.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from projections.errors import (
    INGEST_INVALID_UTF8,
    INGEST_LOSSY_JSON,
    INGEST_MALFORMED_JSON,
    INGEST_TOO_DEEP,
    InputRejected,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_SAFE_INTEGER",
    "JSONDecodeError",
    "JSONEncodeError",
    "check_value",
    "dumps",
    "dumps_pretty",
    "dumps_sorted",
    "for_short_process",
    "format_js_number",
    "join_surrogate_pairs",
    "js_stringify",
    "loads",
    "loads_canonical",
    "loads_lossless",
    "parse_js",
    "stringify_tag_safe_json",
]

# ---------------------------------------------------------------------------------------------
# Bytes for a value and back (orjson's own functions: no layer in between)
# ---------------------------------------------------------------------------------------------

if TYPE_CHECKING:
    # Bound on first use (`__getattr__`, below): orjson's, or in a short process the standard
    # library's writing the same bytes.
    from orjson import JSONDecodeError as JSONDecodeError  # Raised by `loads` (a ValueError).
    from orjson import JSONEncodeError as JSONEncodeError  # Raised by the dumps (a TypeError).
    from orjson import dumps as dumps  # Compact UTF-8 JSON bytes, keys in insertion order.
    from orjson import loads as loads  # A value from JSON bytes or str (see `loads_lossless`).

    def dumps_sorted(value: Any, /) -> bytes:
        """`dumps` with keys sorted at every level: one writing per value, for digests and
        stable files."""

#: The names bound on first use, and what binds them.
_ENGINE_NAMES = frozenset({"dumps", "loads", "dumps_sorted", "JSONDecodeError",
                           "JSONEncodeError"})
_orjson_module: Any = None
_short_process = False


def _orjson() -> Any:
    """orjson, imported on the first call that needs it."""
    global _orjson_module
    if _orjson_module is None:
        import orjson

        _orjson_module = orjson
    return _orjson_module


def for_short_process() -> None:
    """Declare this process short-lived: the engine names imported from here after this call
    (`dumps`, `loads`, `dumps_sorted` and their errors) are the standard library's, unless
    orjson's are bound already."""
    global _short_process
    _short_process = True


def __getattr__(name: str) -> Any:
    if name not in _ENGINE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    names = _standard_names() if _short_process else _orjson_names()
    globals().update(names)
    return names[name]


def _orjson_names() -> dict[str, Any]:
    orjson = _orjson()
    return {"dumps": orjson.dumps, "loads": orjson.loads,
            "dumps_sorted": functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS),
            "JSONDecodeError": orjson.JSONDecodeError, "JSONEncodeError": orjson.JSONEncodeError}


#: JSON's whitespace (RFC 8259), which may surround a value.
_WHITESPACE = " \t\n\r"
#: The deepest nesting orjson writes: a deeper value goes to orjson, which refuses it.
_ORJSON_DEPTH = 254


def _plain(value: Any, depth: int = 0) -> bool:
    """True if the standard library writes `value` byte for byte as orjson does: str keys;
    str, int within 64 bits, bool, None; lists, tuples and dicts of those (exact types, no
    subclasses). Floats are not: the two print some of them differently (`1e+16`, `1e16`)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if depth >= _ORJSON_DEPTH:
        return False
    if kind is dict:
        return all(type(key) is str and _plain(item, depth + 1) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_plain(item, depth + 1) for item in value)
    return False


def _standard_names() -> dict[str, Any]:
    """The engine names as the standard library's json module provides them."""
    import json

    def refuse_constant(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not JSON", name, 0)

    def finite(text: str) -> float:
        number = float(text)
        if not math.isfinite(number):  # orjson refuses a number past a double's range
            raise json.JSONDecodeError(f"number {text[:40]} overflows a double", text, 0)
        return number

    decoder = json.JSONDecoder(parse_constant=refuse_constant, parse_float=finite)
    compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                               check_circular=False)
    ordered = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                               check_circular=False, sort_keys=True)

    def loads(data: bytes | bytearray | memoryview | str) -> Any:
        try:
            text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError(f"invalid UTF-8: {exc.reason}", "", exc.start) from None
        # raw_decode, not decode: decode's two whitespace scans cost more than a short value's
        # parse, and what this project writes has no whitespace around it
        start = len(text) - len(text.lstrip(_WHITESPACE)) if text[:1] in _WHITESPACE else 0
        value, end = decoder.raw_decode(text, start)
        if end != len(text) and text[end:].strip(_WHITESPACE):
            raise json.JSONDecodeError("Extra data", text, end)
        return value

    def writer(encoder: json.JSONEncoder, sort: bool) -> Callable[[Any], bytes]:
        def dumps(value: Any, /) -> bytes:
            if _plain(value):
                try:
                    return encoder.encode(value).encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate: orjson's error says so
                    pass
            orjson = _orjson()
            return bytes(orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort else None))

        return dumps

    return {"dumps": writer(compact, False), "loads": loads,
            "dumps_sorted": writer(ordered, True), "JSONDecodeError": json.JSONDecodeError,
            # orjson's JSONEncodeError is a TypeError: what the writers above raise
            "JSONEncodeError": TypeError}


_PRETTY_INDENT = 2


def dumps_pretty(value: Any) -> str:
    """JSON text indented by two spaces, for people to read; non-string keys (an int, say) are
    written as strings rather than refused."""
    if _short_process and _plain(value):
        import json

        try:
            text = json.dumps(value, ensure_ascii=False, indent=_PRETTY_INDENT,
                              allow_nan=False, check_circular=False)
            text.encode("utf-8")  # a lone surrogate: orjson's error says so
            return text
        except UnicodeEncodeError:
            pass
    orjson = _orjson()
    return str(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
               .decode("utf-8"))


# ---------------------------------------------------------------------------------------------
# A line of record, without silent loss (coded rejections: see the module docstring)
# ---------------------------------------------------------------------------------------------

#: Deepest accepted nesting of arrays and objects in one line. Real logs nest a handful of levels
#: (an importer wraps a record in 3 more); orjson cannot serialize past 255, so the store could
#: not write such a line back.
MAX_JSON_DEPTH = 128
#: JavaScript's Number.MAX_SAFE_INTEGER: the largest integer every reader of the log agrees on.
MAX_SAFE_INTEGER = 2**53 - 1


def loads_lossless(line: bytes) -> Any:
    """Parse one JSON text losslessly; raises InputRejected with one of the codes named in the
    module docstring."""
    return loads_canonical(line)[0]


def loads_canonical(line: bytes) -> tuple[Any, bool]:
    """`loads_lossless`, and whether `line` is exactly orjson's compact writing of the value
    (then the line's bytes ARE the value's serialization: callers keep them instead of dumping
    again, and every number in it is a safe integer or a finite float)."""
    orjson = _orjson_module or _orjson()
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
    orjson = _orjson_module or _orjson()
    try:
        return bool(orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER) == line)
    except TypeError:  # (orjson's JSONEncodeError is one)  # e.g. past orjson's nesting limit
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
    import json  # only lines orjson would not write back pay for the standard library's parser

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


# ---------------------------------------------------------------------------------------------
# JSON exactly as JavaScript's JSON.stringify writes it (PROTOCOL §4.4)
# ---------------------------------------------------------------------------------------------

# JS escapes only these, control characters and lone surrogates; everything else (U+2028/2029,
# DEL, all non-ASCII) stays literal.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t"}
# Compiled on first use (their surrogate ranges cost a read path's process to compile):
# `re` keeps each compiled pattern.
_NEEDS_ESCAPE = '["\\\\\x00-\x1f\ud800-\udfff]'
_SURROGATE = "[\ud800-\udfff]"
# Array-index keys (canonical uint32 below 2**32 - 1) come first in a JS object, ascending.
_INDEX_KEY = re.compile("0|[1-9][0-9]*")
_MAX_INDEX = 2**32 - 2


def join_surrogate_pairs(text: str) -> str:
    """Python strs may hold a UTF-16 pair as two code points; JS sees one character there."""
    if re.search(_SURROGATE, text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _quote(text: str) -> str:
    return '"' + re.sub(_NEEDS_ESCAPE, _escape_char, join_surrogate_pairs(text)) + '"'


def format_js_number(value: int | float) -> str:
    """Number::toString of ECMA-262: shortest round-trip digits, then JS's own exponent rules."""
    if isinstance(value, int) and abs(value) <= MAX_SAFE_INTEGER:
        return str(value)
    try:
        number = float(value)  # a larger int is the double JS would parse it to
    except OverflowError:
        number = float("inf")
    if not math.isfinite(number):
        raise ValueError("non-finite number is not JSON-serializable")
    if number == 0:
        return "0"  # JS prints -0 as 0
    sign = "-" if number < 0 else ""
    digits, point = _shortest_digits(abs(number))
    return sign + _place_point(digits, point)


def _shortest_digits(number: float) -> tuple[str, int]:
    """(digits, n) with number == 0.digits × 10**n; Python's repr already gives shortest digits."""
    mantissa, _, exponent = repr(number).partition("e")
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    stripped = raw.lstrip("0")
    point = len(whole) + int(exponent or 0) - (len(raw) - len(stripped))
    return stripped.rstrip("0"), point


def _place_point(digits: str, n: int) -> str:
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    exponent = n - 1
    mark = "+" if exponent >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{mark}{abs(exponent)}"


def _ordered_keys(keys: list[str]) -> list[str]:
    index_keys = [k for k in keys if _INDEX_KEY.fullmatch(k) and int(k) <= _MAX_INDEX]
    if not index_keys:
        return keys
    chosen = set(index_keys)
    return sorted(index_keys, key=int) + [k for k in keys if k not in chosen]


def js_stringify(value: Any) -> str:
    """Exactly `JSON.stringify(value)`; raises ValueError for anything that is not a JSON value
    (where JS would print null for NaN/Infinity we refuse: such data is never lossless)."""
    parts: list[str] = []
    _write(value, parts, set())
    return "".join(parts)


def _write(value: Any, parts: list[str], path: set[int]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_quote(value))
    elif isinstance(value, (int, float)):
        parts.append(format_js_number(value))
    elif isinstance(value, (list, tuple, dict)):
        _write_container(value, parts, path)
    else:
        raise ValueError(f"{type(value).__name__} is not JSON-serializable")


def _write_container(value: list[Any] | tuple[Any, ...] | dict[Any, Any], parts: list[str],
                     path: set[int]) -> None:
    if id(value) in path:
        raise ValueError("cyclic structure is not JSON-serializable")
    path.add(id(value))
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("object keys must be strings to be JSON-serializable")
        parts.append("{")
        for i, key in enumerate(_ordered_keys(list(value))):
            parts.append("," if i else "")
            parts.append(_quote(key) + ":")
            _write(value[key], parts, path)
        parts.append("}")
    else:
        parts.append("[")
        for i, item in enumerate(value):
            parts.append("," if i else "")
            _write(item, parts, path)
        parts.append("]")
    path.discard(id(value))


def stringify_tag_safe_json(value: Any) -> str:
    """PROTOCOL §4.4: JSON.stringify with every `<` as `\\u003c`. A `<` only occurs inside string
    literals of JSON output, so the escape is lossless yet no data can spell a tag."""
    return js_stringify(value).replace("<", "\\u003c")


def parse_js(text: str) -> Any:
    """The value of JSON text as JavaScript's `JSON.parse` reads what `js_stringify` writes: a
    lone surrogate's escape (`"\\udc00"`, valid JSON) is kept, where orjson refuses it. Raises
    ValueError on text that is not JSON."""
    import json  # the standard library reads lone surrogates; only these rare callers need it

    return json.loads(text)
