"""Google Ads campaign rows (GAQL per campaign and `segments.date`).

Accepts what the API returns as JSON (GoogleAdsRow objects: camelCase, nested, int64 as
strings; from `search`, `searchStream` or one row per line) and CSV exports whose header
names the GAQL fields (`metrics.cost_micros` or `metrics.costMicros`). `segments.date` is
already in the account's time zone; `customer.time_zone` and `customer.currency_code`
are used when selected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pipelines.reconcile.billing.records import (
    AdReportRow,
    Invalid,
    Problems,
    currency,
    day,
    number,
    parse_fields,
    text,
    whole_number,
)

COST = "metrics.cost_micros"
REQUIRED = ("customer.id", "campaign.id", "segments.date", COST, "metrics.conversions",
            "metrics.conversions_value")
# Our credits fall on the order's day; Google credits the ad interaction's day unless the
# *_by_conversion_date metrics are selected. Those are preferred when present.
BY_CONVERSION_DATE = ("metrics.conversions_by_conversion_date",
                      "metrics.conversions_value_by_conversion_date")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'metrics': {'costMicros': '5'}} -> {'metrics.cost_micros': '5'}; CSV headers that
    are already dotted are normalised the same way."""
    flat: dict[str, Any] = {}
    for name, value in record.items():
        path = ".".join(snake(part) for part in f"{prefix}{name}".split("."))
        if isinstance(value, dict):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def parse(records: Iterable[tuple[str, dict[str, Any]]], problems: Problems, *,
          columns: Sequence[str] | None, default_currency: str = "",
          reported_at: str = "") -> list[AdReportRow]:
    """`columns`: the CSV header (None for JSON rows, which may leave zero metrics out:
    proto3 JSON omits default values)."""
    from_csv = columns is not None
    rows = [(where, flatten(record)) for where, record in records]
    if columns is not None:
        missing = [f for f in REQUIRED if f not in flatten(dict.fromkeys(columns, ""))]
        if missing:
            problems.add(f"{problems.source}:1", "header",
                         f"missing column(s) {', '.join(missing)}")
            return []
    by_conversion_date = any(BY_CONVERSION_DATE[0] in flat for _, flat in rows)
    conversions_field, value_field = BY_CONVERSION_DATE if by_conversion_date \
        else ("metrics.conversions", "metrics.conversions_value")

    def metric(name: str):  # type: ignore[no-untyped-def]
        def get(r: dict[str, Any]) -> float:
            if name not in r and not from_csv:
                return 0.0
            return number(r.get(name), name)
        return get

    def account_currency(r: dict[str, Any]) -> str:
        raw = r.get("customer.currency_code") or default_currency
        if not raw:
            raise Invalid("missing: select customer.currency_code in the query or set "
                          "billing.default_currency")
        return currency(raw)

    checks = {
        "customer.id": lambda r: customer_id(r.get("customer.id")),
        "campaign.id": lambda r: text(r.get("campaign.id")),
        "segments.date": lambda r: day(r.get("segments.date")),
        COST: lambda r: 0 if COST not in r and not from_csv else whole_number(r.get(COST)),
        conversions_field: metric(conversions_field),
        value_field: metric(value_field),
        "customer.currency_code": account_currency,
    }
    out = []
    for where, flat in rows:
        values = parse_fields(where, flat, problems, checks)
        if values is None:
            continue
        out.append(AdReportRow(
            "google_ads", values["customer.id"], values["campaign.id"],
            values["segments.date"], values["customer.currency_code"],
            spend=values[COST] / 1_000_000, conversions=values[conversions_field],
            revenue=values[value_field], time_zone=str(flat.get("customer.time_zone") or ""),
            date_basis="conversion" if by_conversion_date else "interaction",
            source=where, reported_at=reported_at))
    return out


def customer_id(raw: object) -> str:
    """Customer ids are shown as 123-456-7890 in the UI and sent as digits by the API."""
    value = text(raw).replace("-", "")
    if not value.isdigit():
        raise Invalid(f"not a customer id: {raw!r}")
    return value
