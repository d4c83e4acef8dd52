"""`seedance ltv return` on a SQLite warehouse: it refreshes customer_ltv and ltv_return and
prints the channels' rows of the table it wrote, with totals that are the rows' sums."""

from __future__ import annotations

import re

import pytest

from jobs.cli import main
from pipelines.store.warehouse import Warehouse
from tests.ltv_warehouse import load, simulated


def channel_line(out: str, channel: str) -> list[str]:
    (line,) = [x for x in out.splitlines() if x.startswith(f"{channel} ")]
    return line.split()


def test_return_refreshes_the_tables_and_prints_what_they_hold(url: str, capsys):
    orders = simulated(300, 5)
    with Warehouse(url) as wh:
        load(wh, orders)
    assert main(["ltv", "return", "--warehouse", url, "--rounds", "4",
                 "--calibration-weeks", "20"]) == 0
    out = capsys.readouterr().out
    with Warehouse(url) as wh:
        stored = {key: (customers, cac, first_roi, ltv_roi) for key, customers, cac, first_roi,
                  ltv_roi in wh.query(
                      "SELECT key, customers, cac, first_order_roi, ltv_roi FROM ltv_return "
                      "WHERE model = 'last_click' AND dimension = 'channel'")}
        (scored,), = wh.query("SELECT COUNT(*) FROM customer_ltv")
        (calibrated,), = wh.query("SELECT COUNT(*) FROM ltv_calibration")
    assert scored == 300 and calibrated > 0
    assert f"{scored:,} customers scored" in out
    assert set(stored) == {"search", "social"}
    for key, (customers, cac, first_roi, ltv_roi) in stored.items():
        cells = channel_line(out, key)
        assert float(cells[1].replace(",", "")) == pytest.approx(customers, abs=0.05)
        assert float(cells[3]) == pytest.approx(cac, abs=0.005)
        assert float(cells[4]) == pytest.approx(first_roi, abs=0.005)
        assert float(cells[5]) == pytest.approx(ltv_roi, abs=0.005)
    total = channel_line(out, "all")
    assert float(total[2].replace(",", "")) == pytest.approx(
        sum(c for c, *_ in stored.values()), abs=0.05)
    assert float(total[2].replace(",", "")) == pytest.approx(
        (orders.stage == "new").sum(), abs=0.05)


def test_return_says_what_is_missing(url: str, capsys):
    with Warehouse(url):
        pass
    assert main(["ltv", "return", "--warehouse", url]) == 2
    assert re.search(r"attribution_credits is empty", capsys.readouterr().err)
    assert main(["ltv", "return", "--warehouse", url, "--model", "/nonexistent.json"]) == 2
    assert "--model /nonexistent.json: file not found" in capsys.readouterr().err
