"""pipelines/ltv/transactions.py: transactions from CSV, Parquet and CDNOW's text format,
each bad input named by file, line (or row) and field; and each known user's orders from the
warehouse's credit rows."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.ltv.transactions import (
    Columns,
    TransactionsError,
    day_text,
    read_cdnow,
    read_transactions,
    transactions_from_warehouse,
)
from pipelines.store.warehouse import Warehouse
from schemas.rows import ATTRIBUTION_CREDITS
from udfs.periods import DAY_MS, day_number

CDNOW = Path(__file__).resolve().parents[1] / "fixtures" / "cdnow" / "CDNOW_sample.txt"


def days_of(*stamps: str) -> list[float]:
    """Days since 1970-01-01 UTC, computed with datetime (no pandas)."""
    out = []
    for stamp in stamps:
        moment = datetime.fromisoformat(stamp)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        out.append((moment - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() / 86_400)
    return out


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_timestamps_in_every_form(tmp_path: Path) -> None:
    ms = (date(2024, 3, 5) - date(1970, 1, 1)).days * DAY_MS + 6 * 3_600_000
    path = write(tmp_path, "customer,timestamp,amount,note\n"
                           "c1,2024-03-01,10.5,x\n"
                           "c2,2024-03-02T12:00:00,0,\n"
                           "c1,2024-03-03T01:30:00+02:00,3,\n"
                           "c3,20240304,7.25,\n"
                           f"c2,{ms},1e2,\n"
                           " 7 , 2024-03-06 00:00:00Z , 4 ,\n")
    found = read_transactions(path)
    assert found.customer.tolist() == ["c1", "c2", "c1", "c3", "c2", "7"]
    assert found.day.tolist() == pytest.approx(days_of(
        "2024-03-01", "2024-03-02T12:00:00", "2024-03-02T23:30:00", "2024-03-04",
        "2024-03-05T06:00:00", "2024-03-06"))
    assert found.amount.tolist() == [10.5, 0.0, 3.0, 7.25, 100.0, 4.0]


def test_csv_columns_by_other_names(tmp_path: Path) -> None:
    path = write(tmp_path, "order,user,when,value\no1,u1,2024-01-02,5\n")
    found = read_transactions(path, columns=Columns("user", "when", "value"))
    assert (found.customer.tolist(), found.amount.tolist()) == (["u1"], [5.0])
    assert found.day.tolist() == days_of("2024-01-02")


def test_parquet_with_typed_and_text_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({
        "customer": [101, 102, 101],
        "timestamp": pd.to_datetime(["2024-01-01 06:00", "2024-01-02", "2024-01-09"],
                                    format="ISO8601"),
        "amount": [1.5, 2.0, 0.0],
    }).to_parquet(path)
    found = read_transactions(path)
    assert found.customer.tolist() == ["101", "102", "101"]
    assert found.day.tolist() == pytest.approx(days_of("2024-01-01T06:00", "2024-01-02",
                                                       "2024-01-09"))
    dates = tmp_path / "dates.pq"
    pd.DataFrame({"customer": ["a", "b"], "timestamp": [date(2024, 1, 1), date(2024, 2, 1)],
                  "amount": ["3", "4.5"]}).to_parquet(dates)
    found = read_transactions(dates)
    assert found.day.tolist() == days_of("2024-01-01", "2024-02-01")
    assert found.amount.tolist() == [3.0, 4.5]


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"customer": ["a", "b", "c"], "timestamp": ["2024-01-01"] * 3,
                  "amount": [1.0, -2.0, float("nan")]}).to_parquet(path)
    with pytest.raises(TransactionsError) as error:
        read_transactions(path)
    assert str(error.value) == (f"{path}: row 2: field 'amount' is negative: -2.0 "
                                "(and 1 more invalid rows)")
    pd.DataFrame({"customer": ["a"], "amount": [1.0]}).to_parquet(path)
    with pytest.raises(TransactionsError, match=r"missing column\(s\) timestamp"):
        read_transactions(path)
    garbage = write(tmp_path, "not parquet", "g.parquet")
    with pytest.raises(TransactionsError, match=f"{garbage}: not a readable Parquet file"):
        read_transactions(garbage)


def test_the_cdnow_sample() -> None:
    found = read_transactions(CDNOW, "cdnow")
    assert found.day.size == 6919
    assert np.unique(found.customer).size == 2357
    # the first line: " 00004 0001 19970101  2   29.33"
    assert (found.customer[0], found.day[0], found.amount[0]) == (
        "00004", day_number("1997-01-01"), 29.33)
    assert day_text(found.day.min()) == "1997-01-01"
    assert day_text(found.day.max()) == "1998-06-30"
    assert found.amount.sum() == pytest.approx(sum(
        float(line.split()[4]) for line in CDNOW.read_text().splitlines()))


def test_cdnow_master_form_of_four_fields(tmp_path: Path) -> None:
    path = write(tmp_path, "00001 19970101 1 11.77\n\n00002 19970112 1 12.00\n", "m.txt")
    found = read_cdnow(path)
    assert found.customer.tolist() == ["00001", "00002"]
    assert found.day.tolist() == [day_number("1997-01-01"), day_number("1997-01-12")]


@pytest.mark.parametrize("header", [
    " customer_id  date number_of_cds  dollar_value",  # lifetimes' CDNOW_master.txt
    "customer date quantity amount",
    "ID Date CDs Dollars",
])
def test_cdnow_master_with_a_header_line(tmp_path: Path, header: str) -> None:
    path = write(tmp_path, f"\n{header}\n 00001 19970101  1   11.77\n"
                           " 00002 19970112  1   12.00\n", "m.txt")
    found = read_transactions(path, "cdnow")
    assert found.customer.tolist() == ["00001", "00002"]
    assert found.amount.tolist() == [11.77, 12.00]


def test_cdnow_sample_with_a_header_line(tmp_path: Path) -> None:
    path = write(tmp_path, "customer_id sample_id date cds dollars\n"
                           " 00004 0001 19970101  2   29.33\n", "s.txt")
    assert read_cdnow(path).customer.tolist() == ["00004"]


@pytest.mark.parametrize(("text", "message"), [
    # a header is the first line alone, and as wide as the lines it names
    ("1 19970101 1 1.0\ncustomer date quantity amount\n",
     ":2: field 'date' is not a YYYYMMDD date: 'date'"),
    ("customer date amount\n1 19970101 1 1.0\n",
     ":1: a header line of 3 fields; the lines below it have 4"),
    ("customer date quantity amount\n", ": no transactions below the header line"),
    ("1 19970101 1 1.0\n2 19970101 1\n", ":2: 3 fields, the first line has 4"),
    ("1 1997-01-01 1 1.0\n", ":1: field 'date' is not a YYYYMMDD date: '1997-01-01'"),
    ("1 19970101 1 1.0\n2 19971340 1 1.0\n", ":2: field 'date' is not a YYYYMMDD date: "
                                             "'19971340'"),
    ("1 19970101 x 1.0\n", ":1: field 'quantity' is not a whole number >= 0: 'x'"),
    ("1 19970101 1 -1.0\n", ":1: field 'amount' is negative: -1.0"),
    ("1 19970101 1 abc\n", ":1: field 'amount' is not a number: 'abc'"),
    ("1 19970101\n", ":1: 2 fields; CDNOW lines have 4"),
    ("\n\n", ": empty file"),
])
def test_cdnow_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text, "c.txt")
    with pytest.raises(TransactionsError) as error:
        read_transactions(path, "cdnow")
    assert str(error.value).startswith(f"{path}{message}")


@pytest.mark.parametrize(("rows", "message"), [
    ("c1,2024-01-01,1\nc2,2024-13-01,2\n",
     ":3: field 'timestamp' is not a date (ISO 8601, YYYYMMDD or ms since 1970): '2024-13-01'"),
    ("c1,yesterday,1\n", ":2: field 'timestamp' is not a date"),
    ("c1,2024-01-01,-5\n", ":2: field 'amount' is negative: -5"),
    ("c1,2024-01-01,12 EUR\n", ":2: field 'amount' is not a number: '12 EUR'"),
    ("c1,2024-01-01,\n", ":2: field 'amount' is missing"),
    ("c1,2024-01-01,inf\n", ":2: field 'amount' is not finite: inf"),
    (",2024-01-01,1\n", ":2: field 'customer' is missing"),
    ("c1,,1\n", ":2: field 'timestamp' is missing"),
    ("c1,1e16,1\n", ":2: field 'timestamp' is outside the years 1000 to 9999: '1e16'"),
    ("c1,2024-01-01,1,extra\n", ":2: 4 fields, the header has 3"),
    ("c1,2024-01-01,1\nc2,bad,1\nc3,2024-01-01,-1\n",
     ":3: field 'timestamp' is not a date (ISO 8601, YYYYMMDD or ms since 1970): 'bad' "
     "(and 1 more invalid rows)"),
])
def test_csv_errors_name_file_line_and_field(tmp_path: Path, rows: str, message: str) -> None:
    path = write(tmp_path, "customer,timestamp,amount\n" + rows)
    with pytest.raises(TransactionsError) as error:
        read_transactions(path)
    assert str(error.value).startswith(f"{path}{message}"), str(error.value)


def test_csv_without_rows_or_columns(tmp_path: Path) -> None:
    for text, message in (("", "empty file, expected a header line with columns customer, "
                               "timestamp, amount"),
                          ("customer,timestamp,amount\n", "no transactions"),
                          ("customer,amount\nc,1\n", "missing column(s) timestamp; found: "
                                                     "'customer', 'amount'")):
        path = write(tmp_path, text)
        with pytest.raises(TransactionsError) as error:
            read_transactions(path)
        assert str(error.value).startswith(f"{path}: {message}")
    with pytest.raises(TransactionsError, match=r"file not found"):
        read_transactions(tmp_path / "absent.csv")
    with pytest.raises(TransactionsError, match=r"--format cdnow"):
        read_transactions(CDNOW)  # CDNOW's text read as CSV: the hint


# --- the warehouse ----------------------------------------------------------------------

def credit(model: str, order: str, index: int, user: str, day: str, credit_share: float,
           revenue: float, currency: str = "USD") -> tuple[object, ...]:
    ts = int(day_number(day)) * DAY_MS + 3_600_000
    return (model, order, index, user, ts, day, "search", "", ts - 1000, credit_share,
            revenue, currency, "new")


def test_orders_of_known_users_from_the_credits(warehouse: Warehouse) -> None:
    # the shared fixture: o1 (u1, 300 by last_click, 150 + 150 by linear), o2 (u2, 60),
    # both at conversion_ts_ms 0
    warehouse.store(ATTRIBUTION_CREDITS, [
        credit("last_click", "o3", 0, "u1", "2026-10-05", 1.0, 40.0),
        credit("linear", "o3", 0, "u1", "2026-10-05", 0.25, 10.0),
        credit("linear", "o3", 1, "u1", "2026-10-05", 0.75, 30.0),
        credit("last_click", "o4", 0, "", "2026-10-05", 1.0, 99.0),  # anonymous: left out
    ])
    for model in ("last_click", "linear"):
        found = transactions_from_warehouse(warehouse, model)
        assert found.customer.tolist() == ["u1", "u1", "u2"]
        assert found.amount.tolist() == [300.0, 40.0, 60.0]
        assert found.day.tolist() == [0.0, day_number("2026-10-05") + 1 / 24, 0.0]
    with pytest.raises(TransactionsError, match=r"no orders of a known user credited by "
                                                r"'markov' \(models with credits: "
                                                r"last_click, linear\)"):
        transactions_from_warehouse(warehouse, "markov")


def test_orders_in_several_currencies_are_refused(warehouse: Warehouse) -> None:
    warehouse.store(ATTRIBUTION_CREDITS, [
        credit("last_click", "o9", 0, "u9", "2026-10-05", 1.0, 5.0, "EUR")])
    with pytest.raises(TransactionsError, match=r"2 currencies \(EUR, USD\)"):
        transactions_from_warehouse(warehouse, "last_click")


def test_an_empty_warehouse_says_where_credits_come_from(url: str) -> None:
    with Warehouse(url) as empty, pytest.raises(TransactionsError,
                                                match="credits arrive with `seedance load`"):
        transactions_from_warehouse(empty)


# --- dates where no purchase can lie ----------------------------------------------------

TODAY = day_number("2026-12-06")


def year_of_days(start: str = "2024-01-01", days: int = 300) -> str:
    """Three customers buying every few days from `start` on, as CSV rows."""
    first = int(day_number(start))
    return "".join(f"c{n % 3},{day_text(first + n)},{n % 7 + 1}\n" for n in range(0, days, 2))


@pytest.mark.parametrize(("stray", "today", "message"), [
    ("2099-01-01", TODAY, "field 'timestamp' is 2099-01-01, after the run's clock "
                          "(2026-12-06 UTC): give the last day to use (--as-of) if the data "
                          "are meant to run that late"),
    ("2026-12-08T03:00:00", TODAY, "field 'timestamp' is 2026-12-08, after the run's clock"),
    # the clock far ahead (a simulation's, say): a year typed wrong still stands apart
    ("2042-05-01", day_number("2100-01-01"),
     "field 'timestamp' is 2042-05-01, 6,397 days after the rest of the data (which end "
     "2024-10-25): a typo? give the last day to use (--as-of) if not"),
])
def test_a_transaction_dated_where_none_can_be_is_named(tmp_path: Path, stray: str,
                                                        today: float, message: str) -> None:
    rows = year_of_days()
    path = write(tmp_path, "customer,timestamp,amount\n" + rows + f"c9,{stray},5\n" + rows)
    with pytest.raises(TransactionsError) as error:
        read_transactions(path, today=today)
    assert str(error.value).startswith(f"{path}:152: {message}"), str(error.value)
    assert read_transactions(path).day.max() == pytest.approx(days_of(stray)[0])  # no clock


def test_tomorrow_and_a_history_with_a_pause_are_no_strays(tmp_path: Path) -> None:
    # a day's grace for shops east of Greenwich; a year's pause after a longer history
    path = write(tmp_path, "customer,timestamp,amount\n" + year_of_days("2021-01-01", 700)
                 + year_of_days("2024-01-01") + "c1,2026-12-07T23:00:00,5\n")
    assert read_transactions(path, today=TODAY).day.size == 501


def test_a_cdnow_line_dated_after_the_clock(tmp_path: Path) -> None:
    path = write(tmp_path, "00001 19970101 1 11.77\n00002 20990112 1 12.00\n"
                           "00003 19970101 1 11.77\n", "c.txt")
    with pytest.raises(TransactionsError, match=r"c\.txt:2: field 'date' is 2099-01-12, "
                                                r"after the run's clock"):
        read_cdnow(path, today=TODAY)


def test_an_order_dated_after_the_clock_is_named_by_its_id(warehouse: Warehouse) -> None:
    warehouse.store(ATTRIBUTION_CREDITS, [
        credit("last_click", f"o{n}", 0, "u1", day_text(day_number("2026-10-01") + n), 1.0,
               5.0) for n in range(3, 9)])
    warehouse.store(ATTRIBUTION_CREDITS, [
        credit("last_click", "o-typo", 0, "u7", "2099-01-01", 1.0, 5.0)])
    assert transactions_from_warehouse(warehouse).day.max() > day_number("2099-01-01")
    with pytest.raises(TransactionsError) as error:
        transactions_from_warehouse(warehouse, today=TODAY)
    assert str(error.value).startswith(
        f"{warehouse.url}: order 'o-typo' of user 'u7' (attribution_credits."
        "conversion_ts_ms) is 2099-01-01, after the run's clock (2026-12-06 UTC)")
