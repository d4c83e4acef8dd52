"""The dashboard's filters: parsed from a query string, turned back into one, and into SQL.

Every page and every CSV export takes the same filters, so a link to a CSV file carries
exactly the selection of the page it sits on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import date
from urllib.parse import urlencode

# query-string names; short, since people read and share these URLs
PARAMS = {"date_from": "from", "date_to": "to", "platform": "platform",
          "campaign": "campaign", "model": "model", "status": "status", "rule": "rule"}
# filters of the control page alone: links to the other pages leave them out
CONTROL_ONLY = ("status", "rule")


class FilterError(ValueError):
    """A filter value that cannot be used, named as the form names it."""


@dataclass(frozen=True)
class Filters:
    date_from: str = ""  # YYYY-MM-DD, inclusive; '' = no lower bound
    date_to: str = ""  # YYYY-MM-DD, inclusive; '' = no upper bound
    platform: str = ""  # ad platform as in ad_spend.platform; '' = all
    campaign: str = ""  # campaign id; '' = all
    model: str = ""  # attribution model of the ROI views; '' = the default model
    status: str = ""  # control page: a decision's, action's or verification's status
    rule: str = ""  # control page: the rule that decided

    @property
    def by_campaign(self) -> bool:
        """True when the selection narrows campaigns (by platform or by campaign)."""
        return bool(self.platform or self.campaign)

    def with_model(self, model: str) -> Filters:
        return replace(self, model=model)

    def for_view(self, view: str) -> Filters:
        """The filters a link to `view` carries (the control page's own only to it)."""
        return self if view == "control" else replace(
            self, **dict.fromkeys(CONTROL_ONLY, ""))

    def query_string(self) -> str:
        """The filters as a URL query (empty values left out), e.g. for CSV links."""
        return urlencode([(PARAMS[f.name], getattr(self, f.name)) for f in fields(self)
                          if getattr(self, f.name)])


def parse_filters(query: Mapping[str, Sequence[str]]) -> Filters:
    """Filters from a parsed query string (urllib.parse.parse_qs); unknown names are
    ignored (a browser adds none, but links may carry tracking parameters)."""
    values = {name: (query.get(param) or [""])[0].strip() for name, param in PARAMS.items()}
    for name in ("date_from", "date_to"):
        if values[name]:
            try:
                values[name] = date.fromisoformat(values[name]).isoformat()
            except ValueError:
                raise FilterError(f"'{PARAMS[name]}' must be a date YYYY-MM-DD, got "
                                  f"{values[name]!r}") from None
    if values["date_from"] and values["date_to"] and values["date_from"] > values["date_to"]:
        raise FilterError(f"'from' ({values['date_from']}) is after 'to' ({values['date_to']})")
    return Filters(**values)


def day_range(column: str, filters: Filters) -> tuple[str, list[object]]:
    """SQL conditions (each starting with AND) and parameters for the date range.
    Days are YYYY-MM-DD text in every table, so text comparison is date comparison."""
    sql, params = "", []
    if filters.date_from:
        sql += f" AND {column} >= ?"
        params.append(filters.date_from)
    if filters.date_to:
        sql += f" AND {column} <= ?"
        params.append(filters.date_to)
    return sql, params


def campaign_filter(column: str, filters: Filters) -> tuple[str, list[object]]:
    """Conditions on a campaign column: the campaign itself, and the platform, which a
    campaign has through its spend rows (ad_spend is the only table that knows it)."""
    sql, params = "", []
    if filters.campaign:
        sql += f" AND {column} = ?"
        params.append(filters.campaign)
    if filters.platform:
        sql += f" AND {column} IN (SELECT campaign FROM ad_spend WHERE platform = ?)"
        params.append(filters.platform)
    return sql, params
