"""Calendar days: which day a timestamp belongs to, where a day starts and ends, and how a
charge period that spans several days is shared out between them (reconciliation).

The one home of DAY_MS and of the UTC day of a time in ms (`day_of`): the streaming jobs,
the backfill, the warehouse and the dashboard date rows through it.

Billing is per day: ad platforms report in the account's time zone, FOCUS bills per charge
period in UTC. Our results carry UTC milliseconds, so each side is brought to the day the
billing source uses before anything is compared.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_MS = 86_400_000
"""Milliseconds in a day."""


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` ('' means UTC); a ValueError names an unknown zone."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (expected an IANA name such as "
                         "Europe/Berlin)") from None


def day_of(ts_ms: int) -> str:
    """UTC day (YYYY-MM-DD) of a time in ms since the epoch; as the ROI job and the
    warehouse date it."""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d")


def day_start_ms(day: str) -> int:
    """The first ms of a UTC day (YYYY-MM-DD)."""
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


def day_end_ms(day: str) -> int:
    """The last ms of a UTC day (YYYY-MM-DD)."""
    return day_start_ms(day) + DAY_MS - 1


def local_day(ts_ms: int, time_zone: str = "") -> str:
    """YYYY-MM-DD of an instant (ms since epoch) in `time_zone` (default UTC)."""
    return datetime.fromtimestamp(ts_ms / 1000, zone(time_zone)).strftime("%Y-%m-%d")


def parse_day(text: str) -> date:
    """A strict YYYY-MM-DD day; ValueError otherwise."""
    if len(text) != 10:
        raise ValueError(f"not a YYYY-MM-DD date: {text!r}")
    return date.fromisoformat(text)


def day_number(text: str) -> int:
    """Days since 1970-01-01 of a strict YYYY-MM-DD day (the unit of the LTV models' day
    columns, ts_ms // DAY_MS); ValueError otherwise."""
    return (parse_day(text) - date(1970, 1, 1)).days


def days_between(first: str, last: str) -> list[str]:
    """Every day from `first` to `last`, both included."""
    start, end = parse_day(first), parse_day(last)
    if end < start:
        raise ValueError(f"the range ends ({last}) before it starts ({first})")
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]


def utc_bounds_ms(first: str, last: str, slack_days: int = 0) -> tuple[int, int]:
    """[start, end) in ms of the UTC days first..last, widened by `slack_days` each side
    (time zones reach 14 hours from UTC, so one day of slack covers any local day)."""
    start = datetime.combine(parse_day(first), datetime.min.time(), UTC)
    end = datetime.combine(parse_day(last), datetime.min.time(), UTC) + timedelta(days=1)
    pad = timedelta(days=slack_days)
    return int((start - pad).timestamp() * 1000), int((end + pad).timestamp() * 1000)


def split_by_day(start_ms: int, end_ms: int, amount: float) -> list[tuple[str, float]]:
    """Share `amount` over the UTC days the period [start, end) touches, in proportion to
    the time spent in each (a FOCUS line or a GPU interval that crosses midnight)."""
    if end_ms <= start_ms:
        return [(local_day(start_ms), amount)]
    parts: list[tuple[str, float]] = []
    cursor = start_ms
    while cursor < end_ms:
        next_midnight = (cursor // DAY_MS + 1) * DAY_MS
        stop = min(next_midnight, end_ms)
        parts.append((local_day(cursor), amount * (stop - cursor) / (end_ms - start_ms)))
        cursor = stop
    return parts
