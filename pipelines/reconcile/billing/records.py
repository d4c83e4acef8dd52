"""What every billing parser produces, and how it reports bad input.

Ad platforms become `AdReportRow`s (the common reconciliation row of the shared format
notes); FOCUS cloud bills become `CloudCostRow`s, EffectiveCost summed per billing period,
ResourceId, charge day and charge category. Problems are collected with their location
(file:line or a JSON path) so one run names every bad row, not just the first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from udfs.periods import parse_day

MAX_SHOWN = 20


class BillingError(ValueError):
    """Invalid billing input; the message lists each problem as `where: field: what`."""

    def __init__(self, source: str, problems: list[str]) -> None:
        shown = "\n  ".join(problems[:MAX_SHOWN])
        more = f"\n  ... and {len(problems) - MAX_SHOWN} more" \
            if len(problems) > MAX_SHOWN else ""
        super().__init__(f"{source}: {len(problems)} problem(s) in the billing input:\n  "
                         f"{shown}{more}")
        self.problems = problems


@dataclass
class Problems:
    """Collects located problems; `raise_if_any` turns them into one BillingError."""

    source: str
    items: list[str] = field(default_factory=list)

    def add(self, where: str, name: str, what: str) -> None:
        self.items.append(f"{where}: {name}: {what}")

    def raise_if_any(self) -> None:
        if self.items:
            raise BillingError(self.source, self.items)


class Invalid(ValueError):
    """One field's problem, turned into a located line by the parser that catches it."""


@dataclass(frozen=True)
class AdReportRow:
    platform: str  # google_ads | meta | what a generic file says (lower case)
    account: str
    campaign: str
    day: str  # YYYY-MM-DD in the account's time zone
    currency: str  # ISO 4217
    spend: float | None  # None: the report does not carry the metric
    conversions: float | None
    revenue: float | None
    time_zone: str = ""  # the account's zone when the report names it
    attribution_window: str = ""
    date_basis: str = "interaction"  # interaction | conversion
    source: str = ""  # file:line, or topic[partition]@offset
    reported_at: str = ""  # when the report was taken (ISO UTC): the latest restatement wins


@dataclass(frozen=True)
class CloudCostRow:
    billing_account: str
    billing_period_start: str  # ISO UTC; one export of a billing period replaces the last
    resource_id: str
    day: str  # UTC charge day
    charge_category: str  # Usage | Purchase | Tax | Credit | Adjustment
    currency: str
    cost: float  # EffectiveCost, corrections included
    correction_cost: float  # the part of `cost` from ChargeClass=Correction lines
    lines: int
    provider: str = ""
    source: str = ""
    reported_at: str = ""


@dataclass
class BillingBatch:
    """What one file or one Kafka message held."""

    source: str
    format: str
    ads: list[AdReportRow] = field(default_factory=list)
    cloud: list[CloudCostRow] = field(default_factory=list)
    # FOCUS: (billing account, billing period start) the batch restates, with its rows
    periods: set[tuple[str, str]] = field(default_factory=set)
    skipped: int = 0  # FOCUS lines without a ResourceId (nothing to match a GPU against)
    reported_at: str = ""


# --- field helpers shared by the parsers ---------------------------------------------

def number(raw: object, name: str = "value", allow_negative: bool = False) -> float:
    """A finite number from a JSON number or a numeric string (Meta sends strings)."""
    if isinstance(raw, bool) or raw is None or raw == "":
        raise Invalid(f"missing {name}" if raw in (None, "") else f"not a number: {raw!r}")
    try:
        value = float(raw.strip()) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise Invalid(f"not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise Invalid(f"not a finite number: {raw!r}")
    if value < 0 and not allow_negative:
        raise Invalid(f"negative: {raw!r}")
    return value


def whole_number(raw: object) -> int:
    """An int64 as JSON sends it (a string) or as a CSV cell; no fractions."""
    text = str(raw).strip() if raw is not None else ""
    if not re.fullmatch(r"-?\d+", text):
        raise Invalid(f"not a whole number: {raw!r}")
    value = int(text)
    if value < 0:
        raise Invalid(f"negative: {raw!r}")
    return value


def day(raw: object) -> str:
    try:
        return parse_day(str(raw).strip()).isoformat()
    except ValueError:
        raise Invalid(f"not a YYYY-MM-DD date: {raw!r}") from None


def currency(raw: object) -> str:
    text = str(raw or "").strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", text):
        raise Invalid(f"not an ISO 4217 currency code: {raw!r}")
    return text


def text(raw: object) -> str:
    value = "" if raw is None else str(raw).strip()
    if not value:
        raise Invalid("missing")
    return value


def timestamp(raw: object) -> datetime:
    """ISO 8601 (a trailing Z or an offset; no offset means UTC) or a datetime from
    Parquet, as an aware UTC datetime."""
    if isinstance(raw, datetime):
        value = raw
    else:
        try:
            value = datetime.fromisoformat(str(raw).strip().replace(" ", "T", 1))
        except ValueError:
            raise Invalid(f"not an ISO 8601 timestamp: {raw!r}") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso_utc(value: datetime) -> str:
    """One spelling for every reported_at, so that text order is time order."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_fields(where: str, record: dict[str, Any], problems: Problems,
                 checks: dict[str, Callable[[dict[str, Any]], object]]) -> dict[str, Any] | None:
    """Apply `checks` (field name -> function of the record): the parsed values, or None
    after recording every failing field with its location."""
    values: dict[str, Any] = {}
    failed = False
    for name, check in checks.items():
        try:
            values[name] = check(record)
        except Invalid as error:
            problems.add(where, name, str(error))
            failed = True
    return None if failed else values


def combine_ad_rows(rows: list[AdReportRow], problems: Problems) -> list[AdReportRow]:
    """One row per (platform, account, campaign, day) of one report: rows of the same key
    are segments of it (a GAQL query that also selects segments.device, say), so their
    metrics add up. They must agree on the currency."""
    groups: dict[tuple[str, str, str, str], list[AdReportRow]] = {}
    for row in rows:
        groups.setdefault((row.platform, row.account, row.campaign, row.day), []).append(row)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        currencies = sorted({r.currency for r in group})
        if len(currencies) > 1:
            problems.add(group[-1].source, "currency",
                         f"{first.campaign} on {first.day} also reported in "
                         f"{', '.join(currencies)} ({first.source})")
            continue

        def added(values: list[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return math.fsum(present) if present else None

        out.append(AdReportRow(
            first.platform, first.account, first.campaign, first.day, first.currency,
            added([r.spend for r in group]), added([r.conversions for r in group]),
            added([r.revenue for r in group]), first.time_zone, first.attribution_window,
            first.date_basis, f"{first.source} (+{len(group) - 1} rows)", first.reported_at))
    return out
