"""Agent tools: the PROTOCOL §6.1 timestamp grammar, calendar checks and sub-millisecond bounds."""

from __future__ import annotations

import datetime
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.faces.mcp.errors import ToolError
from streams.faces.mcp.timestamps import iso_utc, parse_instant, range_bounds

T = 1_764_000_000_000  # 2025-11-24T16:00:00.000Z


@pytest.mark.parametrize(("text", "ms"), [
    ("2025-11-24T16:00Z", T),
    ("2025-11-24T16:00:00Z", T),
    ("2025-11-24T16:00:00.000Z", T),
    ("2025-11-24T17:30:00+01:30", T),
    ("2025-11-24T04:00:00-12:00", T),
    ("2024-02-29T00:00:00Z", 1_709_164_800_000),  # leap year
    ("2000-02-29T00:00Z", 951_782_400_000),  # divisible by 400
    ("1970-01-01T00:00:00.001Z", 1),
    ("1969-12-31T23:59:59.999Z", -1),
    ("2025-11-24T16:00:00+23:59", T - (23 * 60 + 59) * 60_000),
])
def test_whole_millisecond_timestamps(text: str, ms: int) -> None:
    start, end = range_bounds("from", text, "to", text)
    assert start == end == ms


@pytest.mark.parametrize("text", [
    "2025-02-29T00:00Z", "1900-02-29T00:00Z", "2025-04-31T00:00Z", "2025-13-01T00:00Z",
    "2025-00-10T00:00Z", "2025-01-00T00:00Z", "2025-01-01T24:00Z", "2025-01-01T23:60Z",
    "2025-01-01T23:59:60Z", "2025-01-01T00:00+24:00", "2025-01-01T00:00+23:60",
    "2025-01-01T00:00", "2025-01-01 00:00Z", "2025-01-01t00:00z", "2025-1-01T00:00Z",
    "2025-01-01T00:00:00.Z", "2025-01-01T00:00+0100", "+2025-01-01T00:00Z", "",
])
def test_rejected_timestamps(text: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_instant("event_time_from", text)
    assert info.value.code == "SESSION_QUERY_INVALID_FILTER"


def test_sub_millisecond_bounds_are_the_neighbouring_doubles() -> None:
    start, end = range_bounds("from", "2025-11-24T16:00:00.0005Z", "to",
                              "2025-11-24T16:00:00.0005Z")
    assert start == math.nextafter(T, math.inf)  # the event at ms T is excluded
    assert end == math.nextafter(T + 1, -math.inf)  # but an event at ms T is included by `to`
    # Trailing zeros carry no value: .0010 is exactly 1 ms.
    assert range_bounds("from", "2025-11-24T16:00:00.00100000Z", "to", None) == (T + 1, None)


def test_reversals_below_one_millisecond_are_detected() -> None:
    with pytest.raises(ToolError) as info:
        range_bounds("event_time_from", "2025-11-24T16:00:00.00051Z",
                     "event_time_to", "2025-11-24T16:00:00.0005Z")
    assert info.value.message == "event_time_from must not be after event_time_to"
    assert range_bounds("f", "2025-11-24T16:00:00.0005Z", "t", "2025-11-24T16:00:00.00050Z")


@given(st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31)))
def test_iso_round_trips_through_the_grammar(moment: datetime.datetime) -> None:
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    ms = round((moment - datetime.datetime(1970, 1, 1)).total_seconds() * 1000)
    text = iso_utc(ms)
    assert text == moment.isoformat(timespec="milliseconds") + "Z"
    assert parse_instant("t", text).exact_ms == ms


def test_iso_of_years_beyond_four_digits() -> None:
    assert iso_utc(8_640_000_000_000_000) == "+275760-09-13T00:00:00.000Z"
    assert iso_utc(-62_198_755_200_000) == "-000001-01-01T00:00:00.000Z"
