"""Ad spend records on the `ad_spend` topic: one JSON object per campaign and day.

    {"platform": "google_ads", "account": "123-456-7890", "campaign": "spring-sale",
     "day": "2026-09-01", "amount": 1234.56, "currency": "USD"}

A restated report is simply sent again: the latest record per (platform, account,
campaign, day) wins. `seedance spend publish FILE.csv` validates a CSV with those columns
and sends it; errors name the file, line and field.
"""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path
from typing import NamedTuple

from pipelines.sources.text_files import TextFileError, read_csv_rows
from schemas.telemetry import MAX_TEXT, unprintable
from udfs.periods import day_start_ms

FIELDS = ("platform", "account", "campaign", "day", "amount", "currency")
MAX_AMOUNT = 1e12  # per campaign and day (as an order's revenue: schemas/telemetry.py)


class SpendRecord(NamedTuple):
    platform: str
    account: str
    campaign: str
    day: str  # YYYY-MM-DD
    amount: float
    currency: str

    @property
    def day_start_ms(self) -> int:
        return day_start_ms(self.day)

    def to_json(self) -> str:
        return json.dumps(self._asdict(), separators=(",", ":"))

    def key(self) -> str:
        """What a later record of the same key replaces (a restated day), as the record's
        Kafka key: a JSON array of platform, account, campaign and day."""
        return json.dumps([self.platform, self.account, self.campaign, self.day],
                          separators=(",", ":"))


class SpendError(ValueError):
    """What is wrong with a spend record, naming the field."""


def validate(data: dict[str, object]) -> SpendRecord:
    missing = [f for f in FIELDS if data.get(f) in (None, "")]
    if missing:
        raise SpendError(f"field '{missing[0]}' is missing")
    text = {f: str(data[f]).strip() for f in FIELDS}
    try:
        day = date.fromisoformat(text["day"]).isoformat()
    except ValueError:
        raise SpendError(f"field 'day' is not a YYYY-MM-DD date: {text['day']!r}") from None
    raw_amount = data["amount"]
    try:
        amount = float(raw_amount) if not isinstance(raw_amount, bool) else math.nan
    except (TypeError, ValueError):
        amount = math.nan
    if not math.isfinite(amount):
        raise SpendError(f"field 'amount' is not a number: {raw_amount!r}")
    if amount < 0:
        raise SpendError(f"field 'amount' is negative: {amount}")
    if amount > MAX_AMOUNT:  # a unit error or garbage: it would overflow every sum it joins
        raise SpendError(f"field 'amount' is beyond the maximum of {MAX_AMOUNT:g}: {amount:g}")
    for name, value in text.items():  # what every sink stores as text (schemas.telemetry)
        if len(value) > MAX_TEXT:
            raise SpendError(f"field '{name}' is longer than {MAX_TEXT} characters")
        problem = unprintable(value)
        if problem is not None:
            raise SpendError(f"field '{name}' {problem}")
    currency = text["currency"].upper()
    if len(currency) != 3 or not currency.isalpha():
        raise SpendError(f"field 'currency' is not an ISO 4217 code: {text['currency']!r}")
    return SpendRecord(text["platform"].lower(), text["account"], text["campaign"], day,
                       amount, currency)


def parse_message(value: bytes) -> SpendRecord:
    """A topic message -> a record; SpendError with the reason otherwise."""
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SpendError(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise SpendError("not a JSON object")
    return validate(data)


def read_csv(path: Path) -> list[SpendRecord]:
    """Every row of a spend CSV, or SpendError naming file:line: field (a row with more or
    fewer fields than the header is refused: one would shift into another)."""
    try:
        header, rows = read_csv_rows(Path(path), FIELDS)
    except TextFileError as error:
        raise SpendError(str(error)) from None
    absent = [f for f in FIELDS if f not in header]
    if absent:
        raise SpendError(f"{path}:1: missing column(s) {', '.join(absent)}; "
                         f"expected {', '.join(FIELDS)}")
    records = []
    for line, fields in rows:  # a record's first line (a quoted field may span lines)
        try:
            records.append(validate(dict(zip(header, fields, strict=True))))
        except SpendError as error:
            raise SpendError(f"{path}:{line}: {error}") from None
    return records
