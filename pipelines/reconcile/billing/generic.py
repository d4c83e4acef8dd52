"""The generic reconciliation CSV: one row per (platform, account, campaign, date) in the
common shape of the shared format notes. An empty metric cell means "not reported" (the
metric is then not compared for that row), which is not the same as 0.
"""

from __future__ import annotations

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
)

REQUIRED = ("platform", "account_id", "currency", "campaign_id", "date", "spend",
            "conversions", "conversion_value")
OPTIONAL = ("attribution_window", "date_basis", "time_zone")


def optional_number(raw: object, name: str) -> float | None:
    return None if raw is None or str(raw).strip() == "" else number(raw, name)


def date_basis(raw: object) -> str:
    value = str(raw or "interaction").strip().lower()
    if value not in ("interaction", "conversion"):
        raise Invalid(f"must be interaction or conversion, got {raw!r}")
    return value


def parse(records: Iterable[tuple[str, dict[str, Any]]], problems: Problems, *,
          columns: Sequence[str] | None, reported_at: str = "") -> list[AdReportRow]:
    """`columns`: the CSV header, checked first (None for JSON rows)."""
    if columns is not None:
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            problems.add(f"{problems.source}:1", "header",
                         f"missing column(s) {', '.join(missing)}; expected "
                         f"{', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})")
            return []
    checks = {
        "platform": lambda r: text(r.get("platform")).lower(),
        "account_id": lambda r: text(r.get("account_id")),
        "currency": lambda r: currency(r.get("currency")),
        "campaign_id": lambda r: text(r.get("campaign_id")),
        "date": lambda r: day(r.get("date")),
        "spend": lambda r: optional_number(r.get("spend"), "spend"),
        "conversions": lambda r: optional_number(r.get("conversions"), "conversions"),
        "conversion_value": lambda r: optional_number(r.get("conversion_value"),
                                                      "conversion_value"),
        "date_basis": lambda r: date_basis(r.get("date_basis")),
    }
    out = []
    for where, record in records:
        values = parse_fields(where, record, problems, checks)
        if values is None:
            continue
        out.append(AdReportRow(
            values["platform"], values["account_id"], values["campaign_id"], values["date"],
            values["currency"], values["spend"], values["conversions"],
            values["conversion_value"], time_zone=str(record.get("time_zone") or "").strip(),
            attribution_window=str(record.get("attribution_window") or "").strip(),
            date_basis=values["date_basis"], source=where, reported_at=reported_at))
    return out
