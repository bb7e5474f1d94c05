"""Agent tools: the timestamp grammar of PROTOCOL §6.1 — tool bounds to epoch ms, and ms back to ISO."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from streams.faces.mcp.errors import INVALID_FILTER, ToolError

# YYYY-MM-DDTHH:MM[:SS[.frac]](Z|±HH:MM) — nothing else (no lowercase t/z, no space separator).
_GRAMMAR = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:\d{2})\Z")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MS_PER_DAY = 86_400_000
#: Longest accepted fraction of a second. Exact below that (sub-millisecond reversals are still
#: caught); past it the value is absurd and is refused, rather than parsed as a huge integer.
MAX_FRACTION_DIGITS = 64


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (year 0 included, unlike
    `datetime`, so every 4-digit year the grammar admits converts)."""
    y = year - (month <= 2)
    era = y // 400  # floor division: Hinnant's C form pre-adjusts for truncation
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """Inverse of `days_from_civil`."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day


@dataclass(frozen=True, slots=True)
class Instant:
    """A parsed timestamp: its exact value in ms (a fraction, so sub-millisecond reversals are
    caught) and the whole millisecond it falls in."""

    exact_ms: Fraction
    whole_ms: int

    @property
    def has_sub_ms(self) -> bool:
        return self.exact_ms != self.whole_ms

    def as_from(self) -> float:
        """Inclusive lower bound: the ms itself, or the next double above it when a
        sub-millisecond fraction was given (the event time ms is then excluded)."""
        return math.nextafter(self.whole_ms, math.inf) if self.has_sub_ms else self.whole_ms

    def as_to(self) -> float:
        """Inclusive upper bound: the ms itself, or the next double below ms + 1."""
        if self.has_sub_ms:
            return math.nextafter(self.whole_ms + 1, -math.inf)
        return self.whole_ms


def parse_instant(name: str, value: str) -> Instant:
    """Parse and calendar-validate one tool timestamp; failures are INVALID_FILTER."""
    match = _GRAMMAR.match(value)
    bad = ToolError(INVALID_FILTER, f"{name} must be a timestamp "
                    "YYYY-MM-DDTHH:MM[:SS[.fraction]] with Z or ±HH:MM, on a real calendar date")
    if match is None:
        raise bad
    if match.group(7) is not None and len(match.group(7)) > MAX_FRACTION_DIGITS:
        raise ToolError(INVALID_FILTER, f"{name} has a fraction of a second longer than "
                        f"{MAX_FRACTION_DIGITS} digits")
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    fraction = (match.group(7) or "").rstrip("0")  # trailing zeros carry no value
    zone = match.group(8)
    if not 1 <= month <= 12:
        raise bad
    days_in_month = 29 if month == 2 and _is_leap(year) else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= days_in_month or hour > 23 or minute > 59 or second > 59:
        raise bad
    offset_min = 0
    if zone != "Z":
        off_h, off_m = int(zone[1:3]), int(zone[4:6])
        if off_h > 23 or off_m > 59:
            raise bad
        offset_min = (off_h * 60 + off_m) * (1 if zone[0] == "+" else -1)
    base_ms = (days_from_civil(year, month, day) * _MS_PER_DAY
               + ((hour * 60 + minute - offset_min) * 60 + second) * 1000)
    exact = Fraction(base_ms) + (Fraction(int(fraction), 10 ** len(fraction)) * 1000
                                 if fraction else Fraction(0))
    return Instant(exact, math.floor(exact))


def range_bounds(from_name: str, from_value: str | None, to_name: str,
                 to_value: str | None) -> tuple[float | None, float | None]:
    """Both ends of a time range as inclusive ms bounds; a reversal (even below 1 ms) is
    INVALID_FILTER."""
    start = parse_instant(from_name, from_value) if from_value is not None else None
    end = parse_instant(to_name, to_value) if to_value is not None else None
    if start is not None and end is not None and start.exact_ms > end.exact_ms:
        raise ToolError(INVALID_FILTER, f"{from_name} must not be after {to_name}")
    return (start.as_from() if start else None, end.as_to() if end else None)


def iso_utc(ms: int | float) -> str:
    """Epoch ms as JavaScript's `Date.prototype.toISOString` writes it (UTC, milliseconds;
    years outside 0000–9999 as ±YYYYYY)."""
    whole = math.floor(ms)
    days, rest = divmod(whole, _MS_PER_DAY)
    year, month, day = civil_from_days(days)
    seconds, milli = divmod(rest, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"{'-' if year < 0 else '+'}{abs(year):06d}"
    return (f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}."
            f"{milli:03d}Z")
