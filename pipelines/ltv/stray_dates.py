"""Transactions dated where no real purchase can lie: after the run's clock, or so far after
the rest of the data that they are a typo (2099 among 2024).

Without an explicit last day the LTV commands observe customers up to the last
transaction's day, so one such row moves every customer's T, and the holdout, to it: on
300 customers of 2024, one row dated 2099 took their expected purchases over 52 weeks from
996.7 to 202.7 and made a holdout of 27,213 days. They are errors naming the row unless
the last day is given (--as-of).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from udfs.periods import DAY_MS, day_of

# a day's grace past the clock's UTC day: naive local times are read as UTC, and a shop
# east of Greenwich sells "tomorrow" while UTC is still today
CLOCK_GRACE_DAYS = 1
# the latest transactions stand apart from the rest when the gap before them is longer than
# this and than all the data before it, and they are fewer than the rest: a business that
# paused for a year still has a longer history before the pause, or more sales after it
MIN_GAP_DAYS = 366


class StrayDays(NamedTuple):
    rows: np.ndarray  # bool per transaction: dated where no purchase can lie
    reason: Callable[[int], str]  # why, for a flagged row (by position)


def stray_days(day: np.ndarray, today: float) -> StrayDays:
    """The rows of `day` (days since 1970-01-01, fractions allowed) dated after `today`
    (the run's clock, a day number) beyond the grace, or apart after the rest (see
    MIN_GAP_DAYS)."""
    purchase_day = np.floor(np.asarray(day, dtype=np.float64))
    latest = float(np.floor(today)) + CLOCK_GRACE_DAYS
    after_clock = purchase_day > latest
    apart_from = _apart_from(purchase_day)
    apart = purchase_day >= apart_from
    rest = purchase_day[~apart & np.isfinite(purchase_day)]
    rest_end = float(rest.max()) if rest.size else np.nan

    def reason(row: int) -> str:
        text = _day_text(purchase_day[row])
        if after_clock[row]:
            return (f"is {text}, after the run's clock ({_day_text(today)} UTC): give the "
                    "last day to use (--as-of) if the data are meant to run that late")
        return (f"is {text}, {purchase_day[row] - rest_end:,.0f} days after the rest of "
                f"the data (which end {_day_text(rest_end)}): a typo? give the last day to "
                "use (--as-of) if not")

    return StrayDays(after_clock | apart, reason)


def _apart_from(purchase_day: np.ndarray) -> float:
    """The first day of the latest transactions that stand apart (inf: none do)."""
    days, counts = np.unique(purchase_day[np.isfinite(purchase_day)], return_counts=True)
    if days.size < 2:
        return float(np.inf)
    gaps = np.diff(days)
    head_span = days[:-1] - days[0]
    head_rows = np.cumsum(counts)[:-1]
    tail_rows = counts.sum() - head_rows
    apart = (gaps > np.maximum(MIN_GAP_DAYS, head_span)) & (tail_rows < head_rows)
    return float(days[1:][np.argmax(apart)]) if apart.any() else float(np.inf)


def _day_text(day: float) -> str:
    return day_of(int(np.floor(day)) * DAY_MS)
