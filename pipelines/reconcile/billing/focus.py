"""FinOps FOCUS 1.2 / 1.3 cloud bills (CSV or Parquet rows as dicts of columns).

What counts is `EffectiveCost` (amortised, after discounts) per `ResourceId` and charge
day: a charge period spanning several UTC days is shared out by time. Corrections arrive
as extra lines with `ChargeClass=Correction` carrying the charge period they correct, so
they are simply added to that day (and shown apart in `correction_cost`). Lines without a
ResourceId cannot be matched to a GPU and are only counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pipelines.reconcile.billing.records import (
    BillingBatch,
    CloudCostRow,
    Invalid,
    Problems,
    currency,
    iso_utc,
    number,
    parse_fields,
    text,
    timestamp,
)
from udfs.periods import split_by_day

REQUIRED = ("BillingAccountId", "BillingCurrency", "BillingPeriodStart", "ChargePeriodStart",
            "ChargePeriodEnd", "ChargeCategory", "EffectiveCost")
CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
# FOCUS 1.3 names the provider ServiceProviderName; 1.2 ProviderName.
PROVIDER_COLUMNS = ("ServiceProviderName", "ProviderName")


def charge_category(raw: object) -> str:
    value = text(raw)
    if value not in CHARGE_CATEGORIES:
        raise Invalid(f"must be one of {', '.join(CHARGE_CATEGORIES)}, got {raw!r}")
    return value


def charge_class(raw: object) -> str:
    value = "" if raw is None else str(raw).strip()
    if value not in ("", "Correction"):
        raise Invalid(f"must be empty or Correction, got {raw!r}")
    return value


def parse(records: Iterable[tuple[str, dict[str, Any]]], problems: Problems, *,
          columns: Iterable[str] | None, source: str, reported_at: str) -> BillingBatch:
    """`columns`: the file's columns when it has a header (CSV, Parquet), checked first."""
    batch = BillingBatch(source, "focus", reported_at=reported_at)
    if columns is not None:
        missing = [c for c in REQUIRED if c not in set(columns)]
        if missing:
            problems.add(f"{source}:1", "header",
                         f"missing FOCUS column(s) {', '.join(missing)}")
            return batch
    checks = {
        "BillingAccountId": lambda r: text(r.get("BillingAccountId")),
        "BillingCurrency": lambda r: currency(r.get("BillingCurrency")),
        "BillingPeriodStart": lambda r: iso_utc(timestamp(r.get("BillingPeriodStart"))),
        "ChargePeriodStart": lambda r: timestamp(r.get("ChargePeriodStart")),
        "ChargePeriodEnd": lambda r: timestamp(r.get("ChargePeriodEnd")),
        "ChargeCategory": lambda r: charge_category(r.get("ChargeCategory")),
        "ChargeClass": lambda r: charge_class(r.get("ChargeClass")),
        "EffectiveCost": lambda r: number(r.get("EffectiveCost"), "EffectiveCost",
                                          allow_negative=True),
    }
    # shares kept apart and added with fsum at the end: a bill of many small lines must not
    # drift by float rounding before it is compared against a 5 % threshold
    costs: dict[tuple[str, str, str, str, str, str], list[float]] = defaultdict(list)
    corrections: dict[tuple[str, str, str, str, str, str], list[float]] = defaultdict(list)
    providers: dict[tuple[str, str], str] = {}
    for where, record in records:
        values = parse_fields(where, record, problems, checks)
        if values is None:
            continue
        start, end = values["ChargePeriodStart"], values["ChargePeriodEnd"]
        if end <= start:
            problems.add(where, "ChargePeriodEnd", f"{end.isoformat()} is not after "
                                                   f"ChargePeriodStart {start.isoformat()}")
            continue
        account, period = values["BillingAccountId"], values["BillingPeriodStart"]
        batch.periods.add((account, period))
        resource = str(record.get("ResourceId") or "").strip()
        if not resource:
            batch.skipped += 1
            continue
        providers[(account, period)] = next(
            (str(record[c]) for c in PROVIDER_COLUMNS if record.get(c)), "")
        correction = values["ChargeClass"] == "Correction"
        for charge_day, share in split_by_day(int(start.timestamp() * 1000),
                                              int(end.timestamp() * 1000),
                                              values["EffectiveCost"]):
            key = (account, period, resource, charge_day, values["ChargeCategory"],
                   values["BillingCurrency"])
            costs[key].append(share)
            if correction:
                corrections[key].append(share)
    batch.cloud = [
        CloudCostRow(account, period, resource, charge_day, category, cur, math.fsum(shares),
                     math.fsum(corrections.get(key, [])), len(shares),
                     providers.get((account, period), ""), source, reported_at)
        for key, shares in sorted(costs.items())
        for account, period, resource, charge_day, category, cur in [key]]
    return batch
