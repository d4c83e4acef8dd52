"""Each customer's orders as the streaming LTV job keeps them, their summaries and scores.

A tally is one user's orders by order id: (ts_ms, amount) each. A later version of an order
(the attribution job reports a conversion again when late data corrects it) replaces the
earlier one, whatever order the versions arrive in relative to the other orders (an
order's user is fixed before it is first reported: the attribution job's duplicate check
decides which copy counts; a version under another user of the same tallies moves it).

`summaries_of` turns tallies into the summaries the LTV models take, exactly as
`udfs.ltv.model.summaries_from_transactions` does over the same orders (it is called on them, in
one canonical order: a day's amounts are summed by time, then order id); `customer_scores`
scores them as the batch does (`udfs.ltv.segments.score_customers`) and assigns each
customer the segment whose bounds (LTV values, fixed when the model was fitted: the
stream never sees all customers at once) it falls between, so that the stream and a batch
over the same orders, model and bounds give the same rows.
Days are UTC day numbers (days since the epoch, `ts_ms // DAY_MS`). Definitions:
docs/ltv-stream.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from udfs.ltv.model import CustomerSummaries, LtvModel, summaries_from_transactions
from udfs.ltv.segments import SCORE_COLUMNS, SEGMENTS, assign_segments, score_customers
from udfs.periods import DAY_MS, day_of

Orders = dict[str, tuple[int, float]]  # one user's tally: order id -> (ts_ms, amount)
Order = tuple[str, str, int, float]  # (order_id, user_id, ts_ms, amount), as it arrives

# the score columns of schemas.ltv_rows.CUSTOMER_LTV (the rest: user, days, horizon)
SCORES = tuple(name for name in SCORE_COLUMNS if name != "user_id")


def day_number(ts_ms: int) -> int:
    """The UTC day number of a time in ms (the day `summaries_from_transactions` gives it
    from ts_ms / DAY_MS)."""
    return int(ts_ms) // DAY_MS


class Tallies:
    """The tallies of a group of users (a bucket): `users` maps a user to its orders.

    `add` takes orders in arrival order; an order id seen before replaces its version (in
    whichever user's tally it was; a tally left empty goes)."""

    def __init__(self, users: Mapping[str, Orders] | None = None) -> None:
        self.users: dict[str, Orders] = {user: dict(orders)
                                         for user, orders in (users or {}).items() if orders}
        self.owner = {order: user for user, orders in self.users.items() for order in orders}

    def __len__(self) -> int:
        return len(self.users)

    def add(self, orders: Iterable[Order]) -> set[str]:
        """The orders in; the users whose tallies changed (a user whose order moved to
        another user is one of them, and may have no tally left)."""
        changed: set[str] = set()
        for order_id, user, ts_ms, amount in orders:
            before = self.owner.get(order_id)
            if before is not None and before != user:
                left = self.users[before]
                del left[order_id]
                if not left:
                    del self.users[before]
                changed.add(before)
            self.users.setdefault(user, {})[order_id] = (int(ts_ms), float(amount))
            self.owner[order_id] = user
            changed.add(user)
        return changed

    def last_day(self, user: str) -> int:
        """The day of the user's latest order."""
        return day_number(max(ts for ts, _ in self.users[user].values()))

    def last_days(self) -> int | None:
        """The day of the latest order of any of these users (None: no orders)."""
        return max((self.last_day(user) for user in self.users), default=None)


def summaries_of(users: Mapping[str, Orders], as_of_day: int, period_days: float,
                 ) -> tuple[np.ndarray, CustomerSummaries]:
    """Per user (ids sorted, as summaries_from_transactions returns them) the summary of its
    orders up to as_of_day: `summaries_from_transactions(user, ts_ms / DAY_MS, amount,
    end_day=as_of_day, period_days)`; users whose first order is after as_of_day are left
    out. The orders go in sorted by (ts, order id), so a day's amounts are summed in one
    order whatever order they came in."""
    # users by number (in id order): grouping numbers is far faster than grouping strings
    names = sorted(users)
    tallies = [users[user] for user in names]
    customer = np.repeat(np.arange(len(names)), [len(orders) for orders in tallies])
    order_id = np.asarray([order for orders in tallies for order in orders], dtype=str)
    ts = np.asarray([at for orders in tallies for at, _ in orders.values()], dtype=np.int64)
    amount = np.asarray([value for orders in tallies for _, value in orders.values()],
                        dtype=np.float64)
    order = np.lexsort((order_id, ts)) if ts.size else np.zeros(0, dtype=np.int64)
    found, summaries = summaries_from_transactions(
        customer[order], ts[order].astype(np.float64) / DAY_MS, amount[order],
        end_day=float(as_of_day), period_days=period_days)
    return np.asarray(names, dtype=object)[found.astype(np.int64)], summaries


def summaries_at(users: Mapping[str, Orders], as_of: Mapping[str, int], period_days: float,
                 ) -> tuple[np.ndarray, np.ndarray, CustomerSummaries]:
    """`summaries_of` with a day per user (`as_of`, one call per distinct day): ids, their
    as-of days and summaries, grouped by day (ascending), ids sorted within a day."""
    ids, days, parts = [], [], []
    for day in sorted(set(as_of.values())):
        found, summaries = summaries_of({u: users[u] for u, d in as_of.items() if d == day},
                                        day, period_days)
        ids.append(found)
        days.append(np.full(found.size, day, dtype=np.int64))
        parts.append(summaries)
    if not parts:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64), CustomerSummaries.of(
            np.zeros(0), np.zeros(0), np.zeros(0))
    return (np.concatenate(ids), np.concatenate(days), CustomerSummaries(
        *(np.concatenate([getattr(p, name) for p in parts])
          for name in ("frequency", "recency", "age", "monetary", "weight"))))


def check_segments(bounds: Sequence[float], names: Sequence[str]) -> None:
    """ValueError unless the bounds are finite and non-decreasing and there is one more
    name (distinct, non-empty) than bounds."""
    values = np.asarray(bounds, dtype=np.float64)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(np.diff(values) < 0):
        raise ValueError(f"segment bounds must be finite and non-decreasing, got "
                         f"{list(bounds)}")
    if len(names) != values.size + 1:
        raise ValueError(f"{values.size} segment bounds make {values.size + 1} segments, got "
                         f"{len(names)} names")
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"segment names must be distinct non-empty strings, got "
                         f"{list(names)}")


def segment_of(ltv: np.ndarray, bounds: Sequence[float], names: Sequence[str] = SEGMENTS,
               ) -> np.ndarray:
    """Each value's segment by fixed bounds (checked): `udfs.ltv.segments.assign_segments`,
    the number of bounds a value is strictly above picks the name (a value on a bound
    stays below it, equal values share a segment)."""
    check_segments(bounds, names)
    return assign_segments(ltv, np.asarray(bounds, dtype=np.float64), names)


def customer_scores(model: LtvModel, ids: np.ndarray, summaries: CustomerSummaries,
                    horizon_days: float, discount_rate: float, bounds: Sequence[float],
                    names: Sequence[str] = SEGMENTS) -> dict[str, np.ndarray]:
    """SCORES of these customers (summaries in periods of model.period_days): the batch's
    `udfs.ltv.segments.score_customers` (summary in days, P(alive), purchase days expected
    in the horizon, expected value of a purchase day, LTV over the horizon discounted per
    period), the segment by the model's `bounds` rather than by quantiles among these
    customers. A ValueError names a customer the model gives no finite value."""
    # (its own segments, quantiles among these customers, are replaced)
    frame = score_customers(model, ids, summaries, horizon_days,
                            discount_rate=discount_rate) if len(summaries) else None
    scores = {name: (frame[name].to_numpy() if frame is not None else np.zeros(0))
              for name in SCORES}
    scores["segment"] = segment_of(scores["predicted_ltv"], bounds, names)
    return scores


def customer_rows(ids: np.ndarray, as_of_days: np.ndarray, scores: Mapping[str, np.ndarray],
                  horizon_days: int, fitted_through_day: float) -> list[dict[str, Any]]:
    """One schemas.ltv_rows.CUSTOMER_LTV row per customer (as a dict; dates as ISO
    strings, numbers as Python floats)."""
    iso: dict[int, str] = {}

    def date(day: int) -> str:
        if day not in iso:
            iso[day] = day_of(day * DAY_MS)
        return iso[day]

    fitted = date(int(np.floor(fitted_through_day)))
    columns = {name: scores[name].tolist() for name in SCORES}
    return [{"user_id": str(user), "as_of_day": date(int(day)),
             **{name: columns[name][i] for name in SCORES},
             "horizon_days": int(horizon_days), "fitted_through_day": fitted}
            for i, (user, day) in enumerate(zip(ids.tolist(), as_of_days.tolist(),
                                                strict=True))]


class CloseClock:
    """When a bucket scores all its users: at the end of each day that has orders, once the
    watermark has passed it. `closed` is the last day it did (None: not yet), `pending`
    the days with orders after it that wait for the watermark. A plain value (stored as
    it is in keyed state)."""

    def __init__(self, closed: int | None = None, pending: Iterable[int] = ()) -> None:
        self.closed = closed
        self.pending = sorted(set(pending))

    def state(self) -> tuple[int | None, list[int]]:
        return self.closed, list(self.pending)

    def note(self, days: Iterable[int]) -> list[int]:
        """Days with orders in; those that are new to wait for (after the last close)."""
        new = sorted({d for d in days if (self.closed is None or d > self.closed)}
                     - set(self.pending))
        self.pending = sorted({*self.pending, *new})
        return new

    def close(self, watermark: int) -> int | None:
        """The day to score the bucket as of now that the watermark is `watermark`: the
        latest pending day whose end it has passed (earlier ones are covered by it), or
        None if none has ended."""
        due = [d for d in self.pending if (d + 1) * DAY_MS - 1 <= watermark]
        if not due:
            return None
        self.closed = due[-1]
        self.pending = [d for d in self.pending if d > self.closed]
        return self.closed

    def close_all(self) -> int | None:
        """Every pending day closed at once (the watermark is at its end): the last one."""
        if self.pending:
            self.closed = self.pending[-1]
            self.pending = []
            return self.closed
        return None

    def as_of(self, tallies: Tallies, users: Iterable[str]) -> dict[str, int]:
        """The day each user is scored as of when its orders change: its latest order's day,
        or the last close if that is later (a row never goes back behind a close)."""
        return {user: max(tallies.last_day(user), self.closed if self.closed is not None
                          else -(2**62)) for user in users if user in tallies.users}
