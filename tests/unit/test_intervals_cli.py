"""`seedance intervals` against a warehouse of simulated credit rows whose true channel
shares are known: the keys it writes, intervals around the points, coverage of the true
share across days, seeding, and what the dashboard reads back (latest_intervals)."""

from __future__ import annotations

import contextlib
import io
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
import yaml

from jobs.cli import main
from pipelines.store.intervals import credit_days, credit_rows_of_day, latest_intervals
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.periods import DAY_MS

# --- the simulated population -----------------------------------------------------------
# Every order converts; under last_click its one credit row goes to a channel drawn with
# LAST_P, under linear it has 1-3 touches, each drawn with TOUCH_P and credited 1/L. The
# expected share of a channel's credit is then exactly LAST_P (last_click) and TOUCH_P
# (linear): the truth the daily share intervals should cover 95 % of the time.

CHANNELS = ("email", "search", "display")
LAST_P = np.array([0.5, 0.3, 0.2])
TOUCH_P = np.array([0.2, 0.3, 0.5])
TRUE_SHARE = {"last_click": dict(zip(CHANNELS, LAST_P, strict=True)),
              "linear": dict(zip(CHANNELS, TOUCH_P, strict=True))}
DAYS = 100
ORDERS = 300  # per day
FIRST = date(2026, 3, 1)


def credit_rows(rng: np.random.Generator, day: date) -> list[tuple[object, ...]]:
    """One day's ATTRIBUTION_CREDITS rows (in its column order)."""
    day_text = day.isoformat()
    start = (day - date(1970, 1, 1)).days * DAY_MS
    out: list[tuple[object, ...]] = []
    for n in range(ORDERS):
        order, ts = f"{day_text}-o{n}", start + int(rng.integers(DAY_MS))
        revenue = float(rng.gamma(2.0, 40.0))
        last = CHANNELS[rng.choice(3, p=LAST_P)]
        touches = [CHANNELS[c] for c in rng.choice(3, size=int(rng.integers(1, 4)), p=TOUCH_P)]
        credited = [("last_click", len(touches) - 1, last, 1.0)] + [
            ("linear", i, channel, 1.0 / len(touches)) for i, channel in enumerate(touches)]
        for model, index, channel, credit in credited:
            out.append((model, order, index, f"u{n}", ts, day_text, channel, "", ts - 1000,
                        credit, credit * revenue, "EUR", "new"))
    return out


@pytest.fixture(scope="module")
def warehouse_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("intervals")
    url = f"sqlite:///{folder / 'warehouse.db'}"
    rng = np.random.default_rng(20260301)
    with Warehouse(url) as warehouse:
        for d in range(DAYS):
            warehouse.store(rows.ATTRIBUTION_CREDITS, credit_rows(rng, FIRST + timedelta(d)))
    config = folder / "job.yaml"
    config.write_text(yaml.safe_dump({"warehouse": {"url": url}}))
    return url, str(config)


def stored(url: str) -> pd.DataFrame:
    names = rows.CREDIT_INTERVAL.names
    with Warehouse(url) as warehouse:
        found = warehouse.query(f"SELECT {', '.join(names)} FROM credit_intervals "
                                "ORDER BY model, period, channel")
    return pd.DataFrame(found, columns=list(names))


@pytest.fixture(scope="module")
def computed(warehouse_config):
    """Every day's intervals, computed once; the printed output and the stored rows."""
    url, config = warehouse_config
    with Warehouse(url) as warehouse:
        warehouse.execute("DELETE FROM credit_intervals")
    printed = io.StringIO()  # capsys is per test
    with contextlib.redirect_stdout(printed):
        assert main(["intervals", "--config", config, "--seed", "11"]) == 0
    return printed.getvalue(), stored(url)


LAST_DAY = (FIRST + timedelta(DAYS - 1)).isoformat()


def test_every_model_day_and_channel_gets_one_row(computed):
    printed, result = computed
    assert list(result.columns) == list(rows.CREDIT_INTERVAL.names)
    days = [(FIRST + timedelta(d)).isoformat() for d in range(DAYS)]
    expected = {(m, d, c) for m in TRUE_SHARE for d in days for c in CHANNELS}
    assert set(zip(result.model, result.period, result.channel, strict=True)) == expected
    assert len(result) == len(expected)
    assert (result.level == 0.95).all() and (result.resamples == 1000).all()
    assert (result.seed == 11).all()
    # per model and day the credits are the day's orders, the shares sum to 1
    per_day = result.groupby(["model", "period"])
    assert per_day.credit.sum().to_numpy() == pytest.approx(ORDERS)
    assert per_day.share.sum().to_numpy() == pytest.approx(1.0)
    assert f"100 days from {FIRST.isoformat()} to {LAST_DAY}" in printed
    assert f"  {LAST_DAY}: {ORDERS} orders" in printed
    assert f"{len(expected):,} rows written to credit_intervals" in printed


def test_the_points_are_the_sums_of_the_credit_rows(computed, warehouse_config):
    url, _ = warehouse_config
    _, result = computed
    with Warehouse(url) as warehouse:
        credits = credit_rows_of_day(warehouse, LAST_DAY)
    sums = credits.groupby(["model", "channel"])[["credit", "revenue"]].sum()
    last = result[result.period == LAST_DAY].set_index(["model", "channel"])
    assert last.credit.to_dict() == pytest.approx(sums.credit.to_dict())
    assert last.revenue.to_dict() == pytest.approx(sums.revenue.to_dict())


def test_intervals_contain_the_point(computed):
    _, result = computed
    for measure in ("credit", "revenue", "share"):
        assert (result[f"{measure}_low"] <= result[measure]).all(), measure
        assert (result[measure] <= result[f"{measure}_high"]).all(), measure
        assert (result[f"{measure}_low"] < result[f"{measure}_high"]).all(), measure


def test_share_intervals_cover_the_true_share_at_the_nominal_rate(computed):
    _, result = computed
    truth = np.array([TRUE_SHARE[m][c] for m, c in zip(result.model, result.channel,
                                                       strict=True)])
    hit = (result.share_low <= truth) & (truth <= result.share_high)
    per_cell = hit.groupby([result.model, result.channel]).mean()
    assert hit.mean() == pytest.approx(0.95, abs=0.03), per_cell.to_dict()
    assert (per_cell - 0.95).abs().max() < 0.07, per_cell.to_dict()
    # and they are not wide for nothing: about 2 x 1.96 x sqrt(p (1 - p) / n) for last_click
    last = result[(result.model == "last_click") & (result.channel == "email")]
    expected_width = 2 * 1.96 * np.sqrt(0.25 / ORDERS)
    assert (last.share_high - last.share_low).mean() == pytest.approx(expected_width, rel=0.1)


def test_a_rerun_gives_the_same_rows_and_a_day_alone_too(computed, warehouse_config, capsys):
    url, config = warehouse_config
    _, first = computed
    volatile = ["computed_at"]
    assert main(["intervals", "--config", config, "--seed", "11", "--from", LAST_DAY]) == 0
    again = stored(url)
    pd.testing.assert_frame_equal(again.drop(columns=volatile), first.drop(columns=volatile))
    assert main(["intervals", "--config", config, "--seed", "12", "--from", LAST_DAY,
                 "--to", LAST_DAY, "--model", "linear"]) == 0
    other = stored(url)
    changed = other.drop(columns=volatile).compare(first.drop(columns=volatile))
    assert set(changed.index) == set(first.index[(first.period == LAST_DAY)
                                                 & (first.model == "linear")])
    capsys.readouterr()
    assert main(["intervals", "--config", config, "--seed", "11", "--from", LAST_DAY]) == 0
    pd.testing.assert_frame_equal(stored(url).drop(columns=volatile),
                                  first.drop(columns=volatile))


def test_summary_and_latest_intervals(computed, warehouse_config):
    url, _ = warehouse_config
    printed, result = computed
    assert f"{LAST_DAY}: share of each model's credited conversions, 95 % interval" in printed
    with Warehouse(url) as warehouse:
        latest = latest_intervals(warehouse, "last_click")
        assert latest_intervals(warehouse, "markov").empty
        assert credit_days(warehouse, LAST_DAY, None, ("linear",)) == [LAST_DAY]
    assert list(latest.columns) == list(rows.CREDIT_INTERVAL.names)
    assert set(latest.period) == {LAST_DAY}
    assert list(latest.credit) == sorted(latest.credit, reverse=True)
    top = latest.iloc[0]
    assert (f"  last_click: {top.channel} {100 * top.share:.1f} % "
            f"[{100 * top.share_low:.1f}, {100 * top.share_high:.1f}]") in printed


def test_no_credits_in_range_is_a_message_not_an_error(warehouse_config, capsys):
    _, config = warehouse_config
    assert main(["intervals", "--config", config, "--from", "2030-01-01"]) == 0
    out = capsys.readouterr().out
    assert "no attribution credits from 2030-01-01 to the end" in out
    assert main(["intervals", "--config", config, "--model", "markov"]) == 0
    assert "no attribution credits from the start to the end for markov" in \
        capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--from", "2026-13-01"], "--from: month must be in 1..12"),
    (["--to", "yesterday"], "--to: not a YYYY-MM-DD date: 'yesterday'"),
    (["--from", "2026-03-05", "--to", "2026-03-01"], "--to 2026-03-01 is before --from"),
    (["--level", "95"], "--level must lie strictly between 0 and 1"),
    (["--resamples", "1"], "--resamples must be at least 2"),
    (["--model", "magic"], "unknown attribution model(s) magic"),
])
def test_bad_arguments_are_one_line_errors(warehouse_config, capsys, args, message):
    _, config = warehouse_config
    assert main(["intervals", "--config", config, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
