"""Transactions for the LTV models: (customer, day, amount) per purchase, read strictly.

From a file:

- CSV (UTF-8, a header line) or Parquet with the columns `customer`, `timestamp` and
  `amount` (other names through `Columns`; other columns are ignored). A timestamp is an
  ISO 8601 date or date-time (naive means UTC), `YYYYMMDD` (eight digits: CDNOW's form) or
  milliseconds since 1970-01-01 (any other number); in Parquet also a date or timestamp
  column. An amount is a number >= 0.
- CDNOW's text format: whitespace-separated `customer date quantity amount` per line
  (CDNOW_master.txt), or `customer sample_id date quantity amount` (CDNOW_sample.txt; the
  first column is the customer either way), the date as `YYYYMMDD`.

Columns are parsed whole; the first bad row raises TransactionsError naming the file, the
line (a Parquet file: the row), the field and the value. From the warehouse: each known
user's orders under one attribution model (`transactions_from_warehouse`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ltv.stray_dates import stray_days
from pipelines.sources.text_files import TextFileError, read_csv, read_text_strictly
from udfs.periods import DAY_MS

if TYPE_CHECKING:
    from pipelines.store.warehouse import Warehouse

FORMATS = ("csv", "parquet", "cdnow")
CDNOW_FIELDS = {4: ("customer", "date", "quantity", "amount"),
                5: ("customer", "sample_id", "date", "quantity", "amount")}
# days since 1970-01-01 a timestamp may fall on: the years 1000 to 9999
FIRST_DAY, LAST_DAY = -354_285.0, 2_932_896.0
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
_EPOCH = pd.Timestamp(0, tz="UTC")


class TransactionsError(ValueError):
    """Invalid transactions input, located: file, line (or row) and field."""


class Transactions(NamedTuple):
    customer: np.ndarray  # customer ids, str
    day: np.ndarray  # days since 1970-01-01 UTC, float (the fraction is the time of day)
    amount: np.ndarray  # float, >= 0


@dataclass(frozen=True)
class Columns:
    """The names of a CSV or Parquet file's columns."""

    customer: str = "customer"
    timestamp: str = "timestamp"
    amount: str = "amount"

    def names(self) -> tuple[str, str, str]:
        return self.customer, self.timestamp, self.amount


def transactions_through(transactions: Transactions, last_day: float) -> Transactions:
    """Those of `transactions` on or before the day `last_day`."""
    keep = np.floor(transactions.day) <= last_day
    return Transactions(*(part[keep] for part in transactions))


def format_of(path: Path, given: str | None = None) -> str:
    """`given`, else by the file's suffix: .parquet/.pq is Parquet, anything else CSV."""
    if given is not None:
        if given not in FORMATS:
            raise TransactionsError(f"unknown transactions format {given!r}; expected one of "
                                    f"{', '.join(FORMATS)}")
        return given
    return "parquet" if Path(path).suffix.lower() in (".parquet", ".pq") else "csv"


def read_transactions(path: Path | str, format: str | None = None,
                      columns: Columns = Columns(), today: float | None = None,
                      ) -> Transactions:
    """The transactions of a file, in file order; TransactionsError on any bad row. With
    `today` (the run's clock, a day number) a row dated after it, or far after the rest,
    is one too (pipelines/ltv/stray_dates.py)."""
    path = Path(path)
    kind = format_of(path, format)
    if kind == "cdnow":
        return read_cdnow(path, today)
    if kind == "parquet":
        data, where = _parquet_columns(path, columns)
    else:
        data, where = _csv_columns(path, columns)
    if len(data[columns.customer]) == 0:
        raise TransactionsError(f"{path}: no transactions (the file has no rows)")
    check = _Checker(where)
    customer = check.customer(data[columns.customer], columns.customer)
    day = check.days(data[columns.timestamp], columns.timestamp)
    amount = check.amount(data[columns.amount], columns.amount)
    check.stray(day, columns.timestamp, today)
    check.finish()
    return Transactions(customer, day, amount)


def read_cdnow(path: Path | str, today: float | None = None) -> Transactions:
    """CDNOW_master.txt or CDNOW_sample.txt (see the module's doc); `today` as
    read_transactions takes it."""
    path = Path(path)
    try:
        text = read_text_strictly(path)
    except TextFileError as error:
        raise TransactionsError(str(error)) from None
    records = [(number, line.split()) for number, line in enumerate(text.splitlines(), 1)
               if line.strip()]
    if not records:
        raise TransactionsError(f"{path}: empty file, expected lines of "
                                f"{' '.join(CDNOW_FIELDS[4])}")
    header = _cdnow_header(path, records)
    if header is not None:
        records = records[1:]
    width = len(records[0][1])
    if header is not None and header[1] != width:
        raise TransactionsError(f"{path}:{header[0]}: a header line of {header[1]} fields; "
                                f"the lines below it have {width}")
    if width not in CDNOW_FIELDS:
        raise TransactionsError(
            f"{path}:{records[0][0]}: {width} fields; CDNOW lines have 4 "
            f"({' '.join(CDNOW_FIELDS[4])}) or 5 ({' '.join(CDNOW_FIELDS[5])})")
    for number, fields in records:
        if len(fields) != width:
            raise TransactionsError(f"{path}:{number}: {len(fields)} fields, the first line "
                                    f"has {width} ({' '.join(CDNOW_FIELDS[width])})")
    lines = np.array([number for number, _ in records])
    data = {name: pa.array(values, type=pa.string())
            for name, values in zip(CDNOW_FIELDS[width], zip(*(f for _, f in records),
                                                             strict=True), strict=True)}
    check = _Checker(lambda row: f"{path}:{lines[row]}")
    customer = check.customer(data["customer"], "customer")
    day = check.days(data["date"], "date", compact_only=True)
    quantity = data["quantity"]
    check.flag(~_matches(quantity, r"^\d+$"), "quantity",
               lambda row: f"is not a whole number >= 0: {quantity[row].as_py()!r}")
    amount = check.amount(data["amount"], "amount")
    check.stray(day, "date", today)
    check.finish()
    return Transactions(customer, day, amount)


def _cdnow_header(path: Path, records: list[tuple[int, list[str]]],
                  ) -> tuple[int, int] | None:
    """(line, fields) of a header line, else None. The copy of CDNOW_master.txt in the
    lifetimes package, and those made from it, start with one (`customer_id date
    number_of_cds dollar_value`); the originals do not. A header is the first line, its
    every field a name (a letter first): no data line can look like that, as a date is
    digits."""
    number, fields = records[0]
    if not all(re.match(r"^[A-Za-z_]", field) for field in fields):
        return None
    if len(records) == 1:
        raise TransactionsError(f"{path}: no transactions below the header line")
    return number, len(fields)


def transactions_from_warehouse(warehouse: Warehouse, model: str = "last_click",
                                today: float | None = None) -> Transactions:
    """Each known user's orders under attribution model `model` (pipelines/store/
    ltv_inputs.py): the user is the customer, the order's revenue its amount. `today` as
    read_transactions takes it: a stray order is named by its id."""
    from pipelines.store.ltv_inputs import credited_models, customer_orders, order_at
    from pipelines.store.warehouse import redacted_url

    users, times, revenue, currencies = customer_orders(warehouse, model)
    where = redacted_url(warehouse.url)
    if users.size == 0:
        models = credited_models(warehouse)
        raise TransactionsError(
            f"{where}: no orders of a known user credited by {model!r}"
            + (f" (models with credits: {', '.join(models)})" if models else
               " (attribution_credits is empty: credits arrive with `seedance load` or a "
               "backfill)"))
    if len(currencies) > 1:
        raise TransactionsError(f"{where}: {model!r} credits orders in {len(currencies)} "
                                f"currencies ({', '.join(currencies)}); a customer's value "
                                "is summed in one")
    if not np.all(revenue >= 0):
        raise TransactionsError(f"{where}: an order of user {users[revenue < 0][0]!r} has "
                                f"negative revenue under {model!r}")
    days = times / DAY_MS
    stray = stray_days(days, today) if today is not None else None
    if stray is not None and stray.rows.any():
        row = int(np.argmax(stray.rows))
        more = int(stray.rows.sum()) - 1
        user = str(users[row])
        order = order_at(warehouse, model, user, int(times[row]))
        raise TransactionsError(
            f"{where}: order {order!r} of user {user!r} (attribution_credits."
            f"conversion_ts_ms) {stray.reason(row)}"
            + (f" (and {more} more such orders)" if more > 0 else ""))
    return Transactions(users, days, revenue)


Data = dict[str, pa.Array]


def _csv_columns(path: Path, columns: Columns) -> tuple[Data, Callable[[int], str]]:
    try:
        read = read_csv(path, columns.names())
    except TextFileError as error:
        raise TransactionsError(str(error)) from None
    _require(path, columns, read.header)
    data = {name: read.table.column(read.header.index(name)).combine_chunks()
            for name in dict.fromkeys(columns.names())}
    lines = read.lines
    return data, lambda row: f"{path}:{lines[row]}"


def _parquet_columns(path: Path, columns: Columns) -> tuple[Data, Callable[[int], str]]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise TransactionsError(f"{path}: file not found")
    try:
        names = pq.read_schema(path).names
        _require(path, columns, names)
        table = pq.read_table(path, columns=list(dict.fromkeys(columns.names())))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as error:
        raise TransactionsError(f"{path}: not a readable Parquet file: {error}") from None
    data = {name: table.column(name).combine_chunks() for name in table.column_names}
    return data, lambda row: f"{path}: row {row + 1}"


def _require(path: Path, columns: Columns, found: list[str]) -> None:
    missing = [name for name in dict.fromkeys(columns.names()) if name not in found]
    if missing:
        hint = " (CDNOW's text format? --format cdnow)" \
            if len(found) == 1 and len(found[0].split()) >= 4 else ""
        raise TransactionsError(f"{path}: missing column(s) {', '.join(missing)}; found: "
                                f"{', '.join(map(repr, found))}{hint}")


def _text(column: pa.Array) -> pa.Array:
    """Values as trimmed text, '' where missing."""
    if not pa.types.is_string(column.type):
        column = pc.cast(column, pa.string())
    return pc.fill_null(pc.utf8_trim_whitespace(column), "")


def _numpy(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _matches(text: pa.Array, pattern: str) -> np.ndarray:
    return np.asarray(_numpy(pc.match_substring_regex(text, pattern)), dtype=bool)


def _empty(text: pa.Array) -> np.ndarray:
    return np.asarray(_numpy(pc.equal(text, "")), dtype=bool)


def _days_of_compact(text: pa.Array) -> np.ndarray:
    """Days of YYYYMMDD texts, NaN where that is no date (a day past the month's end too)."""
    parsed = pc.strptime(text, format="%Y%m%d", unit="s", error_is_null=True)
    valid = pc.fill_null(pc.equal(pc.strftime(parsed, format="%Y%m%d"), text), False)
    seconds = pc.if_else(valid, pc.cast(parsed, pa.int64()), None)
    return np.asarray(_numpy(pc.cast(seconds, pa.float64())), dtype=float) / 86_400.0


class _Checker:
    """Columns checked whole; the first flagged row (by position, then by the order of the
    checks) is the error, with how many more rows are bad."""

    def __init__(self, where: Callable[[int], str]) -> None:
        self.where = where
        self.first: tuple[int, str, str] | None = None  # row, field, reason
        self.bad: np.ndarray | None = None

    def flag(self, mask: np.ndarray | pd.Series, field: str,
             reason: Callable[[int], str]) -> None:
        mask = np.asarray(mask, dtype=bool)
        self.bad = mask.copy() if self.bad is None else self.bad | mask
        if mask.any():
            row = int(np.argmax(mask))
            if self.first is None or row < self.first[0]:
                self.first = (row, field, reason(row))

    def customer(self, column: pa.Array, field: str) -> np.ndarray:
        text = _text(column)
        self.flag(_empty(text), field, lambda _: "is missing")
        return np.asarray(_numpy(text), dtype=str)

    def days(self, column: pa.Array, field: str, compact_only: bool = False) -> np.ndarray:
        """Days since 1970-01-01 UTC (see the module's doc for the forms)."""
        if pa.types.is_date(column.type):
            days = _numpy(pc.cast(pc.cast(column, pa.date32()).cast(pa.int32()), pa.float64()))
            self.flag(np.isnan(days), field, lambda _: "is missing")
            return np.asarray(days, dtype=float)
        if pa.types.is_timestamp(column.type):
            ticks = pc.cast(pc.cast(column, pa.int64()), pa.float64(), safe=False)  # UTC
            per_day = DAY_MS * {"s": 1e-3, "ms": 1.0, "us": 1e3, "ns": 1e6}[column.type.unit]
            days = np.asarray(_numpy(ticks), dtype=float) / per_day
            self.flag(np.isnan(days), field, lambda _: "is missing")
            return days
        text = _text(column)
        days = np.full(len(text), np.nan)
        compact = _matches(text, r"^\d{8}$")
        number = ~compact & _matches(text, _NUMBER) & (not compact_only)
        iso = ~compact & ~number & ~_empty(text) & (not compact_only)
        if compact.any():
            days[compact] = _days_of_compact(text.filter(pa.array(compact)))
        if number.any():
            found = pd.to_numeric(pd.Series(_numpy(text.filter(pa.array(number)))),
                                  errors="coerce")
            days[number] = found.to_numpy(dtype=float) / DAY_MS
        if iso.any():
            stamps = pd.to_datetime(pd.Series(_numpy(text.filter(pa.array(iso)))),
                                    format="ISO8601", errors="coerce", utc=True)
            days[iso] = ((stamps - _EPOCH) / pd.Timedelta(days=1)).to_numpy(dtype=float)
        self.flag(_empty(text), field, lambda _: "is missing")
        expected = "a YYYYMMDD date" if compact_only \
            else "a date (ISO 8601, YYYYMMDD or ms since 1970)"
        self.flag(np.isnan(days), field,
                  lambda row: f"is not {expected}: {text[row].as_py()!r}")
        self.flag((days < FIRST_DAY) | (days > LAST_DAY), field,
                  lambda row: f"is outside the years 1000 to 9999: {text[row].as_py()!r}")
        return days

    def amount(self, column: pa.Array, field: str) -> np.ndarray:
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) \
                or pa.types.is_decimal(column.type):
            values = np.asarray(_numpy(pc.cast(column, pa.float64())), dtype=float)
            self.flag(np.isnan(values) & _numpy(column.is_null()), field,
                      lambda _: "is missing")
            self.flag(np.isnan(values), field, lambda row: f"is not a number: "
                                                           f"{column[row].as_py()}")
            shown = column
        else:
            text = shown = _text(column)
            try:
                values = np.asarray(_numpy(pc.cast(text, pa.float64())), dtype=float)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values = pd.to_numeric(pd.Series(_numpy(text)), errors="coerce") \
                    .to_numpy(dtype=float)
            self.flag(_empty(text), field, lambda _: "is missing")
            self.flag(np.isnan(values), field,
                      lambda row: f"is not a number: {text[row].as_py()!r}")
        self.flag(np.isinf(values), field, lambda row: f"is not finite: {shown[row].as_py()}")
        self.flag(values < 0, field, lambda row: f"is negative: {shown[row].as_py()}")
        return values

    def stray(self, days: np.ndarray, field: str, today: float | None) -> None:
        """Rows dated after the clock `today` or far after the rest (None: no check)."""
        if today is not None:
            found = stray_days(days, today)
            self.flag(found.rows, field, found.reason)

    def finish(self) -> None:
        if self.first is None:
            return
        row, field, reason = self.first
        more = int(self.bad.sum()) - 1 if self.bad is not None else 0
        raise TransactionsError(f"{self.where(row)}: field '{field}' {reason}"
                                + (f" (and {more} more invalid rows)" if more > 0 else ""))


def day_text(day: float) -> str:
    """YYYY-MM-DD of a day since 1970-01-01 (its floor)."""
    return str(np.datetime64(int(np.floor(day)), "D"))
