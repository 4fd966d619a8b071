"""Window sizes to microseconds: '2 minutes', INTERVAL '1 day', 2 sec, 1 Day, a bare number
(seconds). Used by the planner for RANGE / SLIDE sizes.

>>> interval_us("'2 minutes'")
120000000
>>> interval_us("1 hour 30 minutes")
5400000000
"""
from __future__ import annotations

import re

from .errors import InvalidWindow

UNITS_US = {
    "us": 1, "usec": 1, "usecs": 1, "microsecond": 1, "microseconds": 1,
    "ms": 1000, "msec": 1000, "msecs": 1000, "millisecond": 1000, "milliseconds": 1000,
    "s": 1_000_000, "sec": 1_000_000, "secs": 1_000_000, "second": 1_000_000,
    "seconds": 1_000_000,
    "m": 60_000_000, "min": 60_000_000, "mins": 60_000_000, "minute": 60_000_000,
    "minutes": 60_000_000,
    "h": 3_600_000_000, "hr": 3_600_000_000, "hrs": 3_600_000_000, "hour": 3_600_000_000,
    "hours": 3_600_000_000,
    "d": 86_400_000_000, "day": 86_400_000_000, "days": 86_400_000_000,
    "w": 604_800_000_000, "week": 604_800_000_000, "weeks": 604_800_000_000,
}

_PART = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]+)")
_CLOCK = re.compile(r"^(\d+):(\d{2})(?::(\d{2}(?:\.\d+)?))?$")


def interval_us(text: str) -> int:
    """Microseconds in an interval written as PostgreSQL accepts it (no months or years:
    their length in microseconds is not fixed)."""
    s = text.strip().strip("'").strip()
    if re.fullmatch(r"[+-]?\d+(\.\d+)?", s):
        return round(float(s) * 1_000_000)
    clock = _CLOCK.match(s)
    if clock:
        h, m, sec = clock.groups()
        return round((int(h) * 3600 + int(m) * 60 + float(sec or 0)) * 1_000_000)
    total, pos = 0, 0
    for m in _PART.finditer(s):
        if s[pos:m.start()].strip():
            break
        unit = m.group(2).lower()
        if unit not in UNITS_US:
            raise InvalidWindow(f'invalid window size "{text}": unknown unit "{m.group(2)}"',
                                hint="Use microseconds to weeks, e.g. '10 seconds' or 2 min.")
        total += round(float(m.group(1)) * UNITS_US[unit])
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise InvalidWindow(f'invalid window size "{text}"',
                            hint="Write it as PostgreSQL accepts intervals: '2 minutes', "
                                 "INTERVAL '1 day', 10 seconds.")
    return total
