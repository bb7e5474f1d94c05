"""The codec's short-process engine: the standard library writes the bytes orjson writes and reads
the values orjson reads, and importing the codec does not import orjson."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import codec

ROOT = Path(__file__).resolve().parents[2]
SHORT = codec._standard_names()

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(),  # past 64 bits: orjson refuses, and so must the short engine
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),  # lone surrogates included
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                            st.dictionaries(st.text(), inner, max_size=5),
                            st.dictionaries(st.integers(), inner, max_size=2)),
    max_leaves=25)


def _outcome(write: Any, value: Any) -> bytes | str:
    try:
        return bytes(write(value))
    except TypeError:  # orjson's JSONEncodeError is one
        return "refused"


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_short_engine_writes_the_bytes_orjson_writes(value: Any) -> None:
    assert _outcome(SHORT["dumps"], value) == _outcome(orjson.dumps, value)
    assert _outcome(SHORT["dumps_sorted"], value) == _outcome(
        lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS), value)


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_short_engine_reads_what_orjson_wrote_as_orjson_does(value: Any) -> None:
    try:
        data = orjson.dumps(value)
    except TypeError:
        return
    read = SHORT["loads"](data)
    assert orjson.dumps(read) == orjson.dumps(orjson.loads(data))
    assert SHORT["loads"](data.decode("utf-8")) == read


@pytest.mark.parametrize("text", [b"", b"NaN", b"[Infinity]", b"-Infinity", b"1e400", b"[1,",
                                  b"[1] x", b"\xff", b"{\"a\" 1}", b"\xef\xbb\xbf[]"])
def test_the_short_engine_refuses_what_orjson_refuses(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    with pytest.raises(SHORT["JSONDecodeError"]):
        SHORT["loads"](text)


@pytest.mark.parametrize("text", [b" [1] ", b"\n{\"a\":\"\\u00e9\"}\t", b"\"x\""])
def test_the_short_engine_reads_whitespace_around_a_value(text: bytes) -> None:
    assert SHORT["loads"](text) == orjson.loads(text)


def test_an_orjson_decode_error_is_caught_as_the_short_engines_error() -> None:
    # code written against either binding of JSONDecodeError catches both engines' errors
    assert issubclass(orjson.JSONDecodeError, SHORT["JSONDecodeError"])
    assert issubclass(orjson.JSONEncodeError, SHORT["JSONEncodeError"])


@settings(max_examples=200, deadline=None)
@given(values)
def test_pretty_text_is_the_same_in_a_short_process(value: Any) -> None:
    def pretty(short: bool) -> str:
        before = codec._short_process
        codec._short_process = short
        try:
            return codec.dumps_pretty(value)
        except TypeError:
            return "refused"
        finally:
            codec._short_process = before

    assert pretty(True) == pretty(False)


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=True)
    return done.stdout.strip()


def test_importing_the_codec_does_not_import_orjson() -> None:
    assert _run("import sys, projections.codec\nprint('orjson' in sys.modules)") == "False"


def test_a_short_process_binds_the_standard_librarys_names_and_long_ones_orjsons() -> None:
    short = ("import sys\nfrom projections import codec\ncodec.for_short_process()\n"
             "from projections.codec import dumps, loads\n"
             "print('orjson' in sys.modules, dumps({'a': [1]}), loads(b'[2]'))")
    assert _run(short) == "False b'{\"a\":[1]}' [2]"
    long = ("import sys\nfrom projections.codec import dumps\n"
            "print('orjson' in sys.modules, dumps.__module__)")
    assert _run(long) == "True orjson"
