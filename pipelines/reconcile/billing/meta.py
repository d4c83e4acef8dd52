"""Meta Insights rows (`level=campaign`, `time_increment=1`).

Numbers come as strings. Purchases sit in the `actions` / `action_values` lists under
several aliases at once (`purchase`, `omni_purchase`,
`offsite_conversion.fb_pixel_purchase`, ...): adding them up would count each purchase
two or three times, so exactly one alias is used per row — the first of a configured
preference list that the row carries.
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

DEFAULT_PURCHASE_ACTIONS = ("omni_purchase", "purchase", "offsite_conversion.fb_pixel_purchase")


def one_alias(actions: object, aliases: Sequence[str], name: str) -> tuple[float, str]:
    """The value of the first preferred alias present (0 when none is), and that alias."""
    if actions is None or actions == "":
        return 0.0, ""  # Meta leaves the list out when nothing happened
    if not isinstance(actions, list):
        raise Invalid(f"expected a list of {{action_type, value}}, got {actions!r}")
    by_type: dict[str, object] = {}
    for i, item in enumerate(actions):
        if not isinstance(item, dict) or "action_type" not in item:
            raise Invalid(f"item {i} is not an {{action_type, value}} object: {item!r}")
        by_type[str(item["action_type"])] = item.get("value")
    for alias in aliases:
        if alias in by_type:
            try:
                return number(by_type[alias], f"{name}[{alias}]"), alias
            except Invalid as error:
                raise Invalid(f"{alias}: {error}") from None
    return 0.0, ""


def account_id(raw: object) -> str:
    """Insights sends digits; the Graph API object id carries an act_ prefix."""
    return text(raw).removeprefix("act_")


def parse(records: Iterable[tuple[str, dict[str, Any]]], problems: Problems, *,
          purchase_actions: Sequence[str] = DEFAULT_PURCHASE_ACTIONS,
          default_currency: str = "", attribution_window: str = "",
          reported_at: str = "") -> list[AdReportRow]:
    def account_currency(r: dict[str, Any]) -> str:
        raw = r.get("account_currency") or default_currency
        if not raw:
            raise Invalid("missing: request the account_currency field or set "
                          "billing.default_currency")
        return currency(raw)

    def single_day(r: dict[str, Any]) -> str:
        start, stop = day(r.get("date_start")), day(r.get("date_stop"))
        if start != stop:
            raise Invalid(f"{start}..{stop} is not one day: request time_increment=1")
        return start

    checks = {
        "account_id": lambda r: account_id(r.get("account_id")),
        "campaign_id": lambda r: text(r.get("campaign_id")),
        "date_start": single_day,
        "spend": lambda r: number(r.get("spend"), "spend"),
        "actions": lambda r: one_alias(r.get("actions"), purchase_actions, "actions")[0],
        "action_values": lambda r: one_alias(r.get("action_values"), purchase_actions,
                                             "action_values")[0],
        "account_currency": account_currency,
    }
    out = []
    for where, record in records:
        values = parse_fields(where, record, problems, checks)
        if values is None:
            continue
        out.append(AdReportRow(
            "meta", values["account_id"], values["campaign_id"], values["date_start"],
            values["account_currency"], spend=values["spend"],
            conversions=values["actions"], revenue=values["action_values"],
            attribution_window=attribution_window, date_basis="interaction", source=where,
            reported_at=reported_at))
    return out
