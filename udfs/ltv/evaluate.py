"""How well a purchase model forecasts: a calibration period to fit on, a holdout to check.

The classic check of Fader, Hardie & Lee (2005): the customers whose first purchase falls in
the calibration period are summarised there (x, t_x, T), the model forecasts each one's
repeat purchases in the holdout, E[Y(t) | x, t_x, T] with t the holdout's length, and the
forecasts are set beside the purchases each customer actually made in the holdout, counted
as the summaries count them: distinct purchase days. Two naive forecasts stand beside the
model's: the calibration count again, scaled by the windows' lengths, and the customer's
own calibration rate (x / T) over the holdout.

Days are days since any epoch (floats; a purchase's day is its floor), as in
`udfs.ltv.summaries.summaries_from_transactions`; a window's days are whole and inclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.ltv.models.bgnbd import BgNbd
from udfs.ltv.summaries import CustomerSummaries

TOP_FREQUENCY = 7  # the calibration table's last row holds x >= this


@dataclass(frozen=True)
class HoldoutWindow:
    """Calibration: the days first_day .. calibration_end; holdout: the days after it up to
    holdout_end (all inclusive, whole days)."""

    first_day: float
    calibration_end: float
    holdout_end: float

    def __post_init__(self) -> None:
        for name in ("first_day", "calibration_end", "holdout_end"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value == math.floor(value)):
                raise ValueError(f"HoldoutWindow.{name} must be a whole day, got {value}")
            object.__setattr__(self, name, value)
        if self.calibration_end < self.first_day:
            raise ValueError("the calibration period ends before it starts (day "
                             f"{self.calibration_end:g} < {self.first_day:g})")
        if self.holdout_end <= self.calibration_end:
            raise ValueError("the holdout period has no day")

    @property
    def calibration_days(self) -> float:
        return self.calibration_end - self.first_day + 1.0

    @property
    def holdout_days(self) -> float:
        return self.holdout_end - self.calibration_end


def holdout_purchases(ids: np.ndarray, customer: np.ndarray, day: np.ndarray,
                      window: HoldoutWindow) -> np.ndarray:
    """Each of `ids`' (sorted, unique) distinct purchase days in the holdout; transactions
    of other customers are left out."""
    purchase_day = np.floor(np.asarray(day, dtype=np.float64))
    inside = (purchase_day > window.calibration_end) & (purchase_day <= window.holdout_end)
    customer, purchase_day = np.asarray(customer)[inside], purchase_day[inside]
    if ids.size == 0 or customer.size == 0:
        return np.zeros(ids.size)
    index = np.searchsorted(ids, customer)
    known = index < ids.size
    known[known] = ids[index[known]] == customer[known]
    index, purchase_day = index[known], purchase_day[known]
    pairs = np.unique(np.stack([index.astype(np.float64), purchase_day]), axis=1)
    return np.bincount(pairs[0].astype(np.int64), minlength=ids.size).astype(np.float64)


@dataclass(frozen=True)
class ForecastError:
    total: float
    mae: float
    rmse: float


@dataclass(frozen=True)
class FrequencyRow:
    """Customers of one calibration frequency x (the last row: x >= TOP_FREQUENCY)."""

    frequency: int
    open_ended: bool
    customers: int
    mean_predicted: float
    mean_actual: float

    @property
    def label(self) -> str:
        return f"{self.frequency}+" if self.open_ended else str(self.frequency)


@dataclass(frozen=True)
class HoldoutComparison:
    """Per cohort customer: calibration summaries, the holdout forecasts and the actual
    holdout purchases."""

    ids: np.ndarray
    summaries: CustomerSummaries
    holdout_periods: float  # t of E[Y(t) | ...]
    predicted: np.ndarray
    naive_count: np.ndarray  # x x holdout length / calibration length
    naive_rate: np.ndarray  # x / T x holdout length (0 where T = 0)
    actual: np.ndarray

    def error(self, forecast: np.ndarray) -> ForecastError:
        miss = forecast - self.actual
        return ForecastError(float(forecast.sum()), float(np.abs(miss).mean()),
                             float(np.sqrt((miss ** 2).mean())))

    def by_frequency(self, top: int = TOP_FREQUENCY) -> list[FrequencyRow]:
        """The FHL 2005 conditional-expectation table: per calibration frequency 0..top-1
        and top+, how many customers, their mean forecast and mean actual holdout count."""
        x = self.summaries.frequency
        rows = []
        for k in range(top + 1):
            members = x >= k if k == top else x == k
            count = int(members.sum())
            if count == 0 and k == top:
                continue
            rows.append(FrequencyRow(k, k == top, count, _mean(self.predicted, members),
                                     _mean(self.actual, members)))
        return rows


def _mean(values: np.ndarray, members: np.ndarray) -> float:
    return float(values[members].mean()) if members.any() else math.nan


def compare_holdout(purchases: BgNbd, ids: np.ndarray, summaries: CustomerSummaries,
                    customer: np.ndarray, day: np.ndarray, window: HoldoutWindow,
                    period_days: float) -> HoldoutComparison:
    """The model's, the naive and the actual holdout purchases of the calibration cohort
    (`ids`, `summaries`: summaries_from_transactions up to window.calibration_end)."""
    if len(summaries) != ids.size:
        raise ValueError(f"{ids.size} ids for {len(summaries)} summaries")
    t = window.holdout_days / period_days
    x, age = summaries.frequency, summaries.age
    rate = np.divide(x, age, out=np.zeros(x.size), where=age > 0)
    return HoldoutComparison(
        ids=ids, summaries=summaries, holdout_periods=t,
        predicted=purchases.expected_purchases(t, summaries),
        naive_count=x * (window.holdout_days / window.calibration_days),
        naive_rate=rate * t,
        actual=holdout_purchases(ids, customer, day, window))
