"""A listing's rows (`recall sessions`): each time shown to the minute as datetime shows it, and
untrusted text collapsed to one line and escaped cell by cell, whatever mix of safe and unsafe
sessions a listing holds; `visible` escapes exactly what its patterns match."""

from __future__ import annotations

import datetime
import random
import re
from typing import Any

import pytest

from streams.faces.textsafe import _UNSAFE, _UNSAFE_KEEP_LINES, _escape, visible
from streams.faces.views import SESSION_COLUMNS, ms_to_iso, ms_to_minute, session_rows

EDGES = [0, 1, 59_999, 60_000, 999, 1_000, 86_399_999, 1_700_000_000_000, 1_719_990_499_999,
         951_782_400_000, 253_402_300_799_999]


def _datetime_minute(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d %H:%MZ")


@pytest.mark.parametrize("ms", [*EDGES, -1, -60_001, *range(1_000_000_000_000, 1_000_100_000_000,
                                                             7_654_321)])
def test_a_time_shows_the_minute_datetime_shows(ms: int) -> None:
    assert ms_to_minute(ms) == _datetime_minute(ms)


@pytest.mark.parametrize("ms", [*EDGES, -1, -60_001, 1_234, *range(1_000_000_000_000,
                                                                   1_000_100_000_000, 7_654_321)])
def test_a_time_shows_the_millisecond_datetime_shows(ms: int) -> None:
    # (exact integer arithmetic: ms / 1000 as a float rounds away a millisecond past year ~2200)
    exact = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)
    assert ms_to_iso(ms) == exact.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_an_unknown_time_is_a_dash() -> None:
    assert ms_to_minute(None) == "-"


def test_a_time_past_year_9999_fails_as_datetime_fails() -> None:
    with pytest.raises((ValueError, OverflowError, OSError)):
        ms_to_minute(253_402_300_800_000)


def _record(sid: str, cwd: str | None, title: Any, agent: str | None = "dsh",
            live: bool = False) -> dict[str, Any]:
    return {"header": {"id": sid, "cwd": cwd}, "agent": agent, "eventCount": 3,
            "firstEventTime": 1_000, "lastEventTime": 61_000, "live": live, "title": title}


def _expected(record: dict[str, Any]) -> tuple[str, ...]:
    header, title = record["header"], record.get("title")
    return (visible(header["id"]), visible(record.get("agent") or "-"),
            str(record.get("eventCount", 0)), _datetime_minute(record["firstEventTime"]),
            _datetime_minute(record["lastEventTime"]), "live" if record.get("live") else "-",
            visible(header.get("cwd") or "-"),
            visible(" ".join(title.split())) if isinstance(title, str) and title.strip()
            else "untitled")


SAFE = _record("s-1", "/w/app", "fix  the\tbuild", live=True)
UNSAFE = [_record("s-\x1b[2J", "/w", "t"), _record("s-2", "/w/\u202eevil", None),
          _record("s-3", None, "a\x07b\u2028c", agent=None), _record("s-4", "/w", "  \n "),
          _record("s-5", "/w", "\x85 next\x1c line")]


@pytest.mark.parametrize("unsafe", UNSAFE, ids=range(len(UNSAFE)))
def test_rows_escape_each_untrusted_cell_beside_safe_rows(unsafe: dict[str, Any]) -> None:
    records = [SAFE, unsafe, SAFE]
    rows = session_rows(records)
    assert rows == [_expected(r) for r in records]
    assert all(len(row) == len(SESSION_COLUMNS) for row in rows)


def test_a_safe_listing_is_shown_as_it_is() -> None:
    assert session_rows([SAFE]) == [("s-1", "dsh", "3", "1970-01-01 00:00Z", "1970-01-01 00:01Z",
                                     "live", "/w/app", "fix the build")]


#: Every whitespace and every escaped character, a few printable ones (wide and narrow).
_ALPHABET = ([chr(c) for c in range(0x110000) if chr(c).isspace()]
             + ["\x00", "\x1b", "\x7f", "\x85", "\x9f", "\u061c", "\u200e", "\u202e", "\u2066",
                "\ud800", "\udfff", "a", "Z", "-", "…", "—", "日", "é"])


def test_any_title_is_collapsed_and_escaped_as_one_line_does() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        title = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 8)))
        records = [SAFE, _record("s-r", "/w", title)]
        assert session_rows(records) == [_expected(r) for r in records], repr(title)


def test_visible_escapes_exactly_the_unsafe_characters() -> None:
    rng = random.Random(12)
    for _ in range(3000):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 6)))
        for keep in (False, True):
            pattern = _UNSAFE_KEEP_LINES if keep else _UNSAFE
            assert visible(text, keep_newlines=keep) == re.sub(pattern, _escape, text), repr(text)
