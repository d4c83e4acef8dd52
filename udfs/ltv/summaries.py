"""Per-customer RFM summaries (x, t_x, T, mean repeat value), the input of the LTV models.

The purchase models' likelihoods depend on a customer only through these summaries, so
identical rows can be merged into one row with a weight (`CustomerSummaries.collapsed`):
a fit over many customers then costs what the distinct rows cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

_COLUMNS = ("frequency", "recency", "age", "monetary", "weight")


@dataclass(frozen=True)
class CustomerSummaries:
    """One row per customer (or per group of identical customers, `weight` of them).

    Times are in periods (`period_days` days each, weeks by default) counted from the
    customer's first purchase.
    """

    frequency: np.ndarray  # x: repeat purchases (purchase days after the first), float64
    recency: np.ndarray  # t_x: time of the last purchase since the first
    age: np.ndarray  # T: time from the first purchase to the end of calibration
    monetary: np.ndarray  # mean value of the repeat purchases (0 where x == 0)
    weight: np.ndarray  # how many customers this row stands for

    def __post_init__(self) -> None:
        size = None
        for name in _COLUMNS:
            column = np.ascontiguousarray(getattr(self, name), dtype=np.float64)
            if column.ndim != 1:
                raise ValueError(f"CustomerSummaries.{name} must be one-dimensional")
            if size is not None and column.size != size:
                raise ValueError(
                    f"CustomerSummaries.{name} has {column.size} rows, frequency has {size}")
            size = column.size
            object.__setattr__(self, name, column)

    @classmethod
    def of(cls, frequency: np.ndarray, recency: np.ndarray, age: np.ndarray,
           monetary: np.ndarray | None = None,
           weight: np.ndarray | None = None) -> CustomerSummaries:
        """Summaries with monetary 0 and weight 1 where not given."""
        x = np.asarray(frequency, dtype=np.float64)
        return cls(x, np.asarray(recency, dtype=np.float64), np.asarray(age, dtype=np.float64),
                   np.zeros_like(x) if monetary is None else np.asarray(monetary, np.float64),
                   np.ones_like(x) if weight is None else np.asarray(weight, np.float64))

    def __len__(self) -> int:
        return int(self.frequency.size)

    def customers(self) -> float:
        """How many customers the rows stand for (the sum of the weights)."""
        return float(self.weight.sum())

    def validate(self) -> None:
        """Raise ValueError unless 0 <= t_x <= T, x >= 0, t_x = 0 where x = 0, weights >= 0."""
        x, t_x, age = self.frequency, self.recency, self.age
        checks = (
            (np.isfinite(x) & np.isfinite(t_x) & np.isfinite(age)
             & np.isfinite(self.monetary) & np.isfinite(self.weight), "finite values"),
            (x >= 0, "frequency >= 0"),
            (t_x >= 0, "recency >= 0"),
            (t_x <= age, "recency <= age"),
            ((x > 0) | (t_x == 0), "recency 0 where frequency is 0"),
            (self.weight >= 0, "weight >= 0"),
        )
        for ok, what in checks:
            if not bool(np.all(ok)):
                bad = int(np.flatnonzero(~ok)[0])
                raise ValueError(f"customer summaries need {what}; row {bad} has x={x[bad]}, "
                                 f"t_x={t_x[bad]}, T={age[bad]}, weight={self.weight[bad]}")

    def take(self, rows: np.ndarray) -> CustomerSummaries:
        """The rows selected by an index or a boolean mask."""
        return CustomerSummaries(self.frequency[rows], self.recency[rows], self.age[rows],
                                 self.monetary[rows], self.weight[rows])

    def with_weight(self, weight: np.ndarray) -> CustomerSummaries:
        return CustomerSummaries(self.frequency, self.recency, self.age, self.monetary,
                                 np.asarray(weight, dtype=np.float64))

    def collapsed(self) -> CustomerSummaries:
        """Identical (x, t_x, T, m) rows merged into one, their weights summed.

        Rows of weight 0 are dropped; the merged rows keep the order of their first rows.
        """
        positive = self.weight > 0
        rows = self if bool(positive.all()) else self.take(positive)
        first, group = _groups((rows.frequency, rows.recency, rows.age, rows.monetary))
        return rows.take(first).with_weight(
            np.bincount(group, weights=rows.weight, minlength=first.size))

    def by_purchases(self) -> tuple[CustomerSummaries, np.ndarray]:
        """The distinct (x, t_x, T) rows with their summed weights (monetary 0: what the
        purchase models see), and which of them each row of these summaries is."""
        first, group = _groups((self.frequency, self.recency, self.age))
        merged = CustomerSummaries(self.frequency[first], self.recency[first], self.age[first],
                                   np.zeros(first.size),
                                   np.bincount(group, weights=self.weight, minlength=first.size))
        return merged, group

    def rounded(self, resolution: float) -> CustomerSummaries:
        """t_x and T rounded to multiples of `resolution` periods (e.g. 1/7: the day when
        periods are weeks), so that summaries of continuous times collapse well."""
        if not resolution > 0:
            raise ValueError(f"resolution must be positive, got {resolution}")
        recency = np.round(self.recency / resolution) * resolution
        age = np.maximum(np.round(self.age / resolution) * resolution, recency)
        return CustomerSummaries(self.frequency, recency, age, self.monetary, self.weight)


def _groups(columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Rows equal in all columns: each group's first row (groups in order of first
    appearance) and each row's group. Grouped by hashing (pandas' factorize, column by
    column), not by sorting: a million rows take a fraction of a second."""
    size = columns[0].size
    code = np.zeros(size, dtype=np.int64)
    for column in columns:
        column_code, distinct = pd.factorize(column)
        code, _ = pd.factorize(code * distinct.size + column_code)
    # codes are numbered in order of first appearance: a row is its group's first where its
    # code exceeds every code before it
    seen = np.maximum.accumulate(code) if size else code
    first = np.flatnonzero(code > np.concatenate(([-1], seen[:-1])))
    return first, code


def summaries_from_transactions(customer: np.ndarray, day: np.ndarray, amount: np.ndarray,
                                end_day: float, period_days: float = 7.0,
                                ) -> tuple[np.ndarray, CustomerSummaries]:
    """Per customer (sorted unique ids returned first) the summaries of its transactions.

    A transaction's purchase day is floor(day) (`day`: days since any epoch, fractions
    allowed); only purchase days at or before `end_day`, the last day of the calibration,
    count. Several transactions on one day are one purchase (their amounts summed).
    x = distinct purchase days - 1; t_x = (last day - first day) / period_days;
    T = (end_day - first day) / period_days; monetary = mean amount of the repeat purchase
    days (the first purchase excluded), 0 when x == 0. Customers whose first purchase is
    after end_day do not appear.
    """
    if not period_days > 0:
        raise ValueError(f"period_days must be positive, got {period_days}")
    customer = np.asarray(customer)
    purchase_day = np.floor(np.asarray(day, dtype=np.float64))
    amount = np.asarray(amount, dtype=np.float64)
    if not customer.shape == purchase_day.shape == amount.shape or customer.ndim != 1:
        raise ValueError("customer, day and amount must be one-dimensional and of one length")
    if not np.all(np.isfinite(purchase_day)):
        raise ValueError("day must be finite")
    keep = purchase_day <= end_day
    customer, purchase_day, amount = customer[keep], purchase_day[keep], amount[keep]

    ids, code = np.unique(customer, return_inverse=True)
    code = code.ravel()
    order = np.lexsort((purchase_day, code))
    code, purchase_day, amount = code[order], purchase_day[order], amount[order]
    # one purchase per (customer, day): the first transaction of each starts it
    new = np.ones(code.size, dtype=bool)
    new[1:] = (code[1:] != code[:-1]) | (purchase_day[1:] != purchase_day[:-1])
    starts = np.flatnonzero(new)
    p_code, p_day = code[starts], purchase_day[starts]
    p_amount = np.add.reduceat(amount, starts) if starts.size else amount[:0]

    n = ids.size
    purchases = np.bincount(p_code, minlength=n).astype(np.float64)
    first_of = np.ones(p_code.size, dtype=bool)
    first_of[1:] = p_code[1:] != p_code[:-1]
    first_day = p_day[first_of]  # customers appear in id order, each at least once
    last_of = np.ones(p_code.size, dtype=bool)
    last_of[:-1] = p_code[:-1] != p_code[1:]
    last_day = p_day[last_of]
    repeat_total = np.bincount(p_code[~first_of], weights=p_amount[~first_of], minlength=n)

    frequency = purchases - 1.0
    monetary = np.divide(repeat_total, frequency, out=np.zeros(n), where=frequency > 0)
    summaries = CustomerSummaries(
        frequency=frequency,
        recency=(last_day - first_day) / period_days,
        age=(end_day - first_day) / period_days,
        monetary=monetary,
        weight=np.ones(n),
    )
    return ids, summaries
