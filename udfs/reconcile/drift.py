"""Drift between our numbers and a billing source, and what it means for alerts.

drift = (ours − theirs) / |theirs| per key (platform, account, campaign or GPU resource,
day, metric) and per day in total. |drift| above the metric's threshold, on at least the
metric's minimum volume, is a breach; a breach opens an alert once per key and day, and a
later comparison back under the threshold resolves it. Pure functions: the Beam job, the
CLI and the tests call the same code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

METRICS = ("spend", "conversions", "revenue", "compute_cost")
COUNT_METRICS = frozenset({"conversions"})  # no currency

# A drift equal to the threshold does not alarm; this tolerance keeps float noise
# (1.05 / 1.0 - 1 = 0.05000000000000004) on the quiet side of that rule.
_EPSILON = 1e-9

# Statuses of a comparison (column reconciliation_daily.status).
OK, BREACH, BELOW_MIN_VOLUME, NO_REPORT = "ok", "breach", "below_min_volume", "no_report"


class CurrencyError(ValueError):
    """Amounts in different currencies and no rate to convert them."""


@dataclass(frozen=True)
class Rule:
    """When a drift alarms: |drift| > threshold and max(|ours|, |theirs|) >= min_volume."""

    threshold: float = 0.05
    min_volume: float = 0.0

    def __post_init__(self) -> None:
        if not self.threshold >= 0:
            raise ValueError(f"threshold must be a non-negative fraction, got {self.threshold}")
        if not self.min_volume >= 0:
            raise ValueError(f"min_volume must not be negative, got {self.min_volume}")


@dataclass(frozen=True)
class RateTable:
    """Exchange rates into one base currency: `rates[c]` (or `daily[(day, c)]`, which wins)
    is how many units of `base` one unit of `c` is worth. Empty: no conversion possible."""

    base: str = ""
    rates: Mapping[str, float] = field(default_factory=dict)
    daily: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.rates or self.daily)

    def rate(self, currency: str, day: str) -> float:
        if currency == self.base:
            return 1.0
        value = self.daily.get((day, currency), self.rates.get(currency))
        if value is None:
            raise CurrencyError(f"no exchange rate for {currency} on {day}"
                                + (f" (into {self.base})" if self.base else ""))
        return value

    def convert(self, value: float, source: str, target: str, day: str) -> float:
        if source == target or not source or not target:
            return value
        if not self:
            raise CurrencyError(f"amounts in {source} and {target} cannot be compared without "
                                "a rate table (currency.rates or currency.rates_file)")
        return value * self.rate(source, day) / self.rate(target, day)


class Key(NamedTuple):
    """What one reconciliation row is about. scope: campaign | gpu | total."""

    scope: str
    platform: str
    account: str
    entity: str  # campaign id, FOCUS ResourceId, or '*' for a total
    day: str
    metric: str

    def label(self) -> str:
        return "/".join(p for p in (self.platform, self.account, self.entity) if p)


class Amount(NamedTuple):
    """One contribution to a side of a comparison; `part` names it for the contributors
    list (an order, a workload), '' when it has no finer breakdown."""

    value: float
    currency: str = ""
    part: str = ""


class Contributor(NamedTuple):
    name: str
    ours: float
    theirs: float | None  # None: the billing source has no breakdown at this level


@dataclass(frozen=True)
class Comparison:
    key: Key
    currency: str
    ours: float | None  # None: no row on our side
    theirs: float | None  # None: no row in the billing source
    drift: float  # may be ±inf when theirs is 0 and ours is not
    status: str
    rule: Rule
    contributors: tuple[Contributor, ...] = ()
    source: str = ""  # where the billing numbers came from
    reported_at: str = ""  # the restatement they come from

    @property
    def difference(self) -> float:
        return (self.ours or 0.0) - (self.theirs or 0.0)


def drift(ours: float, theirs: float) -> float:
    """(ours − theirs) / |theirs|; 0 when both are 0, ±inf when only theirs is 0.

    Dividing by |theirs| keeps the sign meaning "we count more" even for a negative bill
    (a resource-day that is net credited)."""
    if theirs == 0:
        return 0.0 if ours == 0 else math.copysign(math.inf, ours)
    return (ours - theirs) / abs(theirs)


def is_breach(d: float, ours: float, theirs: float, rule: Rule) -> bool:
    return volume(ours, theirs) >= rule.min_volume and abs(d) - rule.threshold > _EPSILON


def volume(ours: float, theirs: float) -> float:
    return max(abs(ours), abs(theirs))


def status_of(ours: float | None, theirs: float | None, rule: Rule, covered: bool) -> str:
    if not covered:
        return NO_REPORT
    o, t = ours or 0.0, theirs or 0.0
    if volume(o, t) < rule.min_volume:
        return BELOW_MIN_VOLUME
    return BREACH if is_breach(drift(o, t), o, t, rule) else OK


def _currency_of(amounts: Sequence[Amount]) -> str:
    currencies = {a.currency for a in amounts}
    return currencies.pop() if len(currencies) == 1 else ""


def compare(key: Key, ours: Iterable[Amount], theirs: Iterable[Amount], rule: Rule,
            rates: RateTable | None = None, covered: bool = True, top_n: int = 5,
            source: str = "", reported_at: str = "") -> Comparison:
    """Compare the two sides of one key, whatever order the amounts come in (sums are
    exact-rounded, so a rerun gives equal numbers). Amounts are brought to the billing source's
    currency (or ours when the billing side is missing); different currencies without a
    rate table raise CurrencyError naming the key. An empty side is None ("missing"),
    which counts as 0 in the drift: a row the billing source lacks is money it says was
    not spent."""
    ours, theirs = list(ours), list(theirs)
    rates = rates or RateTable()
    if key.metric in COUNT_METRICS:
        currency = ""
    else:
        currency = _currency_of(theirs) or _currency_of(ours) or rates.base
        if not currency and (ours or theirs):
            currency = (theirs or ours)[0].currency

    def total(amounts: list[Amount]) -> float | None:
        if not amounts:
            return None
        try:
            return math.fsum(rates.convert(a.value, a.currency, currency, key.day)
                             if currency else a.value for a in amounts)
        except CurrencyError as error:
            raise CurrencyError(f"{key.label()} {key.day} {key.metric}: {error}") from None

    ours_total, theirs_total = total(ours), total(theirs)
    d = drift(ours_total or 0.0, theirs_total or 0.0)
    contributors = top_contributors(_parts(ours, rates, currency, key.day),
                                    _parts(theirs, rates, currency, key.day), top_n)
    return Comparison(key, currency, ours_total, theirs_total, d,
                      status_of(ours_total, theirs_total, rule, covered), rule, contributors,
                      source, reported_at)


def _parts(amounts: list[Amount], rates: RateTable, currency: str,
           day: str) -> dict[str, float]:
    # fsum: the engine hands amounts over in any order, and a rerun must give equal rows
    parts: dict[str, list[float]] = defaultdict(list)
    for a in amounts:
        if a.part:
            parts[a.part].append(rates.convert(a.value, a.currency, currency, day)
                                 if currency else a.value)
    return {name: math.fsum(values) for name, values in parts.items()}


def top_contributors(ours: Mapping[str, float], theirs: Mapping[str, float],
                     n: int = 5) -> tuple[Contributor, ...]:
    """The n parts with the largest |ours − theirs| (ties by name). A part only one side
    breaks down keeps None on the other side when that side has no breakdown at all."""
    names = set(ours) | set(theirs)
    has_theirs = bool(theirs)
    rows = [Contributor(name, ours.get(name, 0.0),
                        theirs.get(name, 0.0) if has_theirs else None) for name in names]
    rows.sort(key=lambda c: (-abs(c.ours - (c.theirs or 0.0)), c.name))
    return tuple(rows[:n])


def total(day: str, metric: str, comparisons: Iterable[Comparison], rule: Rule,
          rates: RateTable | None = None, currency: str = "", top_n: int = 5) -> Comparison:
    """The day's total of one metric over every key the billing sources cover, in
    `currency` (the reporting currency; default: the one currency all keys share).
    Its contributors are the keys with the largest differences."""
    rates = rates or RateTable()
    rows = [c for c in comparisons if c.status != NO_REPORT]
    key = Key("total", "*", "*", "*", day, metric)
    if metric in COUNT_METRICS:
        currency = ""
    elif not currency:
        currencies = {c.currency for c in rows}
        if len(currencies) > 1:
            raise CurrencyError(f"total {day} {metric}: keys in {', '.join(sorted(currencies))};"
                                " set currency.reporting and give rates to add them up")
        currency = currencies.pop() if currencies else ""

    def convert(value: float | None, source: str) -> float:
        if not value:
            return 0.0
        try:
            return rates.convert(value, source, currency, day) if currency else value
        except CurrencyError as error:
            raise CurrencyError(f"total {day} {metric}: {error}") from None

    ours_parts = {c.key.label(): convert(c.ours, c.currency) for c in rows}
    theirs_parts = {c.key.label(): convert(c.theirs, c.currency) for c in rows}
    has_ours = any(c.ours is not None for c in rows)
    has_theirs = any(c.theirs is not None for c in rows)
    ours_total = math.fsum(ours_parts.values()) if has_ours else None
    theirs_total = math.fsum(theirs_parts.values()) if has_theirs else None
    d = drift(ours_total or 0.0, theirs_total or 0.0)
    return Comparison(key, currency, ours_total, theirs_total, d,
                      status_of(ours_total, theirs_total, rule, bool(rows)), rule,
                      top_contributors(ours_parts, theirs_parts, top_n))


# --- alert decisions -----------------------------------------------------------------

class AlertState(NamedTuple):
    """The latest alert event of a key and day: open or resolved, and which opening."""

    status: str  # open | resolved
    seq: int


class Transition(NamedTuple):
    kind: str  # open | resolve
    seq: int


def state_of(events: Iterable[tuple[str, int]]) -> AlertState | None:
    """The state after a key-day's stored (kind, seq) events."""
    latest = max(events, key=lambda e: (e[1], e[0] == "resolve"), default=None)
    if latest is None:
        return None
    return AlertState("open" if latest[0] == "open" else "resolved", latest[1])


def decide(state: AlertState | None, comparison: Comparison | None) -> Transition | None:
    """Open on a breach unless already open; resolve an open alert once the key compares
    under its threshold (or below its minimum volume, or vanished on both sides). A day the
    billing source no longer covers changes nothing: missing data proves nothing."""
    if comparison is not None and comparison.status == NO_REPORT:
        return None
    breach = comparison is not None and comparison.status == BREACH
    if breach:
        if state is None:
            return Transition("open", 1)
        if state.status == "resolved":
            return Transition("open", state.seq + 1)  # breached again after a restatement
        return None
    if state is not None and state.status == "open":
        return Transition("resolve", state.seq)
    return None
