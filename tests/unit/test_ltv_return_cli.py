"""`seedance ltv return` on a SQLite warehouse: it refreshes customer_ltv and ltv_return and
prints the channels' rows of the table it wrote, with totals that are the rows' sums."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from jobs.cli import main
from pipelines.store.warehouse import Warehouse
from tests.ltv_warehouse import load, simulated
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel


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


@pytest.mark.parametrize("command", [
    ["ltv", "return", "--warehouse"],
    ["ltv", "fit", "--warehouse"],
    ["ltv", "score", "--model", "{model}", "--warehouse"],
    ["ltv", "evaluate", "--calibration-weeks", "4", "--warehouse"],
    ["dashboard", "--warehouse"],
    ["report"],
])
def test_a_mistyped_warehouse_path_creates_nothing(tmp_path, monkeypatch, capsys,
                                                   command: list[str]):
    """Commands that read a warehouse say there is none at the path, and leave no folder
    or database behind (one created there would hold nothing, and hide the typo)."""
    model = tmp_path / "model.json"
    model.write_text(LtvModel(BgNbd(0.2, 4, 0.8, 2.4), GammaGamma(6, 4, 15), 7.0, 10,
                              0).to_json())
    missing = tmp_path / "typo" / "warehouse.db"
    url = f"sqlite:///{missing}"
    monkeypatch.setenv("SEEDANCE_WAREHOUSE_URL", url)

    def serve(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dashboard served a warehouse that is not there")

    monkeypatch.setattr("pipelines.dashboard.app.make_dashboard_server", serve)
    argv = [part.format(model=model) for part in command]
    assert main([*argv, url] if argv[-1] == "--warehouse" else argv) == 2
    err = capsys.readouterr().err
    assert err == f"seedance: error: no warehouse at {missing}: the file does not exist " \
                  "(check the path; `seedance load` or a job creates one)\n"
    assert not (tmp_path / "typo").exists()
    (tmp_path / "typo").mkdir()
    assert main([*argv, url] if argv[-1] == "--warehouse" else argv) == 2
    assert not missing.exists()
    capsys.readouterr()


def test_a_file_that_is_no_database_is_named(tmp_path, capsys):
    path = tmp_path / "orders.csv"
    path.write_text("customer,timestamp,amount\n" * 200)
    assert main(["ltv", "return", "--warehouse", f"sqlite:///{path}"]) == 2
    assert capsys.readouterr().err == f"seedance: error: {path} is not a SQLite database " \
                                      "(file is not a database)\n"
    assert path.read_text() == "customer,timestamp,amount\n" * 200


def test_an_order_dated_2099_is_refused_unless_as_of_is_given(url: str, capsys):
    orders = simulated(300, 5)
    stray = pd.DataFrame([("o-typo", "u7", 26_663, "repeat", "email", 25.0)],
                         columns=orders.columns)  # 2026-01-01 + 26,663 days: 2099-01-01
    with Warehouse(url) as wh:
        load(wh, pd.concat([orders, stray], ignore_index=True))
    assert main(["ltv", "return", "--warehouse", url, "--rounds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seedance: error: {url}: order 'o-typo' of user 'u7' "
                          "(attribution_credits.conversion_ts_ms) is 2099-01-01, after the "
                          "run's clock ("), err
    assert main(["ltv", "return", "--warehouse", url, "--rounds", "0", "--as-of",
                 "2026-10-28", "--calibration-weeks", "20"]) == 0
    out = capsys.readouterr().out
    assert "customers scored as of 2026-10-28" in out
    with Warehouse(url) as wh:
        assert wh.query("SELECT DISTINCT holdout_end FROM ltv_calibration") == [
            ("2026-10-28",)]


def test_return_on_too_few_customers_warns_that_its_fit_is_no_estimate(url: str, capsys):
    with Warehouse(url) as wh:
        load(wh, simulated(12, 5))
    assert main(["ltv", "return", "--warehouse", url, "--rounds", "0"]) == 0
    out, err = capsys.readouterr()
    assert "12 customers scored" in out and "(fitted model, not an estimate: see the " \
                                            "warnings, 0 bootstrap rounds)" in out
    assert "warning: 12 customers, " in err and "too few to identify the models" in err
