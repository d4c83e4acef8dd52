"""LTV-based return per channel and campaign (udfs/ltv/channel_return.py), the customers' scores and
segments (udfs/ltv/segments.py), the bootstrap models (udfs/ltv/draws.py), the warehouse
tables' sinks (pipelines/store/ltv.py) and the refresh (pipelines/ltv/report.py): small
cases worked out by hand, the totals' tie-outs, and a refresh end to end on SQLite."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import hyp2f1

from pipelines.ltv.report import refresh_calibration, refresh_ltv, store_calibration
from pipelines.store.ltv import (
    credit_frame,
    write_customer_ltv,
    write_ltv_calibration,
    write_ltv_return,
)
from pipelines.store.warehouse import Warehouse
from schemas import rows
from tests.ltv_warehouse import load, simulated
from udfs.lifecycle import StageWeights
from udfs.ltv.allocation import SegmentWeights
from udfs.ltv.channel_return import CREDIT_COLUMNS, cost_shares, ltv_return, value_grid
from udfs.ltv.draws import bootstrap_models
from udfs.ltv.model import (
    BgNbd,
    CustomerSummaries,
    GammaGamma,
    LtvModel,
    fit_model,
    summaries_from_transactions,
)
from udfs.ltv.segments import assign_segments, ltv_segments, score_customers
from udfs.periods import DAY_MS, day_of, day_start_ms
from udfs.roi.day import day_roi

MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4), GammaGamma(p=6.0, q=4.0, v=15.0),
                 period_days=7.0, customers=100.0, fitted_through_day=400.0)


def expected_purchases(t: float, x: float, t_x: float, age: float) -> float:
    """E[Y(t) | x, t_x, T] of MODEL, FHL 2005 eq. 10 written out."""
    r, alpha, a, b = 0.5, 5.0, 0.8, 2.4
    z = t / (alpha + age + t)
    head = (a + b + x - 1) / (a - 1)
    tail = ((alpha + age) / (alpha + age + t)) ** (r + x) * hyp2f1(r + x, b + x,
                                                                   a + b + x - 1, z)
    alive = 1 + (x > 0) * a / (b + x - 1) * ((alpha + age) / (alpha + t_x)) ** (r + x)
    return head * (1 - tail) / alive


def credit(model, order, user, day, stage, channel, campaign, share, revenue):
    return (model, order, user, day, stage, channel, campaign, share, revenue * share, "USD")


def hand_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    """u1 acquired on day 0 (o1, 50; search under last_click, search and social half each
    under linear) buys 30 on day 14, 20 on day 28 and 99 on day 380 (after its 364-day
    horizon); u2 acquired on day 390 by social (o4, 20); u3's only order (day 50) is a
    repeat: acquired before the data; o6 has no user."""
    credits = []
    for model in ("last_click", "linear"):
        if model == "last_click":
            credits.append(credit(model, "o1", "u1", 0, "new", "search", "gs", 1.0, 50.0))
        else:
            credits += [credit(model, "o1", "u1", 0, "new", "search", "gs", 0.5, 50.0),
                        credit(model, "o1", "u1", 0, "new", "social", "fb", 0.5, 50.0)]
        credits += [credit(model, "o2", "u1", 14, "repeat", "email", "", 1.0, 30.0),
                    credit(model, "o3", "u1", 28, "repeat", "search", "gs", 1.0, 20.0),
                    credit(model, "o5", "u1", 380, "repeat", "email", "", 1.0, 99.0),
                    credit(model, "o4", "u2", 390, "new", "social", "fb", 1.0, 20.0),
                    credit(model, "o6", "", 100, "unknown", "search", "gs", 1.0, 500.0),
                    credit(model, "o7", "u3", 50, "repeat", "social", "fb", 1.0, 40.0)]
    costs = [(model, order, ad, compute) for model in ("last_click", "linear")
             for order, ad, compute in (("o1", 40.0, 2.0), ("o4", 25.0, 1.0),
                                        ("o2", 3.0, 0.0), ("o6", 9.0, 0.0))]
    return (pd.DataFrame(credits, columns=list(CREDIT_COLUMNS)),
            pd.DataFrame(costs, columns=["model", "order_id", "ad_spend", "compute_cost"]))


def by_key(table: pd.DataFrame) -> dict[tuple[str, str, str], dict]:
    return {(r["model"], r["dimension"], r["key"]): r for r in table.to_dict("records")}


def test_a_hand_worked_case():
    credits, costs = hand_case()
    result = ltv_return(credits, costs, MODEL, as_of_day=400, horizon_days=364,
                        gross_margin=0.5)
    found = by_key(result.rows)
    # u2: 10 days old at as_of, x = 0: E[Y] over the 354 days left x E[M] = p v / (q - 1)
    mean_value = 6.0 * 15.0 / 3.0

    def u2_value(days: int) -> float:
        return 20.0 + (mean_value * expected_purchases((days - 10) / 7, 0, 0, 10 / 7)
                       if days > 10 else 0.0)

    u1_value = 50.0 + 30.0 + 20.0  # o5 (day 380) is past u1's horizon
    search = found["last_click", "channel", "search"]
    assert search["customers"] == 1.0 and search["acquisition_cost"] == 42.0
    assert search["cac"] == 42.0 and search["first_order_revenue"] == 50.0
    assert search["predicted_value"] == pytest.approx(u1_value, rel=1e-12)
    assert search["ltv_roi"] == pytest.approx(u1_value / 42.0)
    assert search["first_order_roi"] == pytest.approx(50.0 / 42.0)
    # value x 0.5 through day 0, 7, 14, 21, 28: 25, 25, 40, 40, 50 against 42
    assert search["payback_days"] == 28
    social = found["last_click", "channel", "social"]
    assert (social["customers"], social["acquisition_cost"]) == (1.0, 26.0)
    assert social["predicted_value"] == pytest.approx(u2_value(364), rel=1e-9)
    payback = next((t for t in value_grid(364) if 0.5 * u2_value(int(t)) >= 26.0), None)
    assert payback is not None and social["payback_days"] == payback
    # linear: o1 half to each channel, its cost split by credit (no spend to weigh by)
    half = found["linear", "channel", "search"]
    assert (half["customers"], half["acquisition_cost"], half["first_order_revenue"]) == \
        (0.5, 21.0, 25.0)
    assert half["predicted_value"] == pytest.approx(u1_value / 2)
    assert half["cac"] == 42.0 and half["payback_days"] == 28  # 0.25 x 100 >= 21 on day 28
    both = found["linear", "channel", "social"]
    assert (both["customers"], both["acquisition_cost"]) == (1.5, 47.0)
    assert both["predicted_value"] == pytest.approx(u1_value / 2 + u2_value(364), rel=1e-9)
    assert found["linear", "campaign", "fb"]["acquisition_cost"] == 47.0
    # no interval without bootstrap models
    assert search["predicted_value_low"] is None and search["ltv_roi_high"] is None
    assert set(result.customers.user_id) == {"u1", "u2"}  # u3 was acquired before the data
    assert result.currency == "USD"


def test_every_total_ties_out():
    credits, costs = hand_case()
    result = ltv_return(credits, costs, MODEL, as_of_day=400, horizon_days=364)
    acquired = len(result.customers)
    first_cost = costs[costs.order_id.isin(result.customers.order_id)]
    for model in ("last_click", "linear"):
        for dimension in ("channel", "campaign"):
            mine = result.rows[(result.rows.model == model)
                               & (result.rows.dimension == dimension)]
            assert mine.customers.sum() == pytest.approx(acquired)
            spent = first_cost[first_cost.model == model]
            assert mine.acquisition_cost.sum() == pytest.approx(
                (spent.ad_spend + spent.compute_cost).sum())
            assert mine.first_order_revenue.sum() == pytest.approx(
                result.customers.first_order_revenue.sum())
            assert mine.predicted_value.sum() == pytest.approx(
                result.customers.predicted_value.sum())


def test_ad_spend_follows_the_roi_allocation():
    """Day 1: u1's first order touches gs and fb half each; u2's repeat order (its first on
    day 0) touches gs. Spend gs 100, fb 30, stage weights new 0.6, repeat 0.3: ROI gives
    u1's gs row 100 x 0.3 / 0.6 = 50, u2's 50, u1's fb row 30; u1 cost 80 + compute 4."""
    day_credits = pd.DataFrame([
        ("last_click", "o1", 0, "search", "gs", "new", 0.5, 20.0),
        ("last_click", "o1", 1, "social", "fb", "new", 0.5, 20.0),
        ("last_click", "o2", 0, "search", "gs", "repeat", 1.0, 10.0)],
        columns=["model", "order_id", "touch_index", "channel", "campaign", "stage", "credit",
                 "revenue"])
    spend = pd.DataFrame([("google_ads", "a", "gs", 100.0), ("meta", "m", "fb", 30.0)],
                         columns=["platform", "account", "campaign", "amount"])
    roi = day_roi(day_credits, spend, pd.DataFrame([("o1", 4.0)], columns=["order_id", "cost"]),
                  ["last_click"], StageWeights())
    credits = pd.DataFrame([
        credit("last_click", "o0", "u2", 0, "new", "search", "gs", 1.0, 10.0),
        credit("last_click", "o1", "u1", 1, "new", "search", "gs", 0.5, 40.0),
        credit("last_click", "o1", "u1", 1, "new", "social", "fb", 0.5, 40.0),
        credit("last_click", "o2", "u2", 1, "repeat", "search", "gs", 1.0, 10.0)],
        columns=list(CREDIT_COLUMNS))
    days = pd.DataFrame([(1, "gs", 100.0), (1, "fb", 30.0)],
                        columns=["day", "campaign", "amount"])
    result = ltv_return(credits, roi.orders, MODEL, as_of_day=1, horizon_days=28, spend=days)
    found = by_key(result.rows)
    assert found["last_click", "channel", "search"]["acquisition_cost"] == pytest.approx(52.0)
    assert found["last_click", "channel", "social"]["acquisition_cost"] == pytest.approx(32.0)
    u1 = roi.orders.set_index("order_id").loc["o1"]
    assert u1.ad_spend + u1.compute_cost == pytest.approx(84.0)
    # u2's first order (day 0) had no cost row: acquired at no cost
    assert found["last_click", "campaign", "gs"]["customers"] == 1.5


def test_orders_after_as_of_and_anonymous_orders_are_left_out():
    credits, costs = hand_case()
    result = ltv_return(credits, costs, MODEL, as_of_day=100, horizon_days=364)
    assert list(result.customers.user_id) == ["u1"]  # u2 came on day 390
    assert set(result.rows.key) == {"search", "social", "gs", "fb"}
    lc = by_key(result.rows)["last_click", "channel", "search"]
    # u1 is 100 days old: 50 + 30 + 20 realised, the 264 days left expected
    summary = expected_purchases(264 / 7, 2, 28 / 7, 100 / 7)
    order_value = (6 * 15 + 6 * 2 * 25.0) / (6 * 2 + 4 - 1)  # m = (30 + 20) / 2
    assert lc["predicted_value"] == pytest.approx(100.0 + summary * order_value, rel=1e-9)
    empty = ltv_return(credits[credits.user_id == ""], costs, MODEL, 400, 364)
    assert empty.rows.empty and empty.customers.empty


def test_intervals_come_from_the_bootstrap_models():
    credits, costs = hand_case()
    same = ltv_return(credits, costs, MODEL, 400, 364, draws=[MODEL, MODEL])
    for row in same.rows.to_dict("records"):
        assert row["predicted_value_low"] == pytest.approx(row["predicted_value"])
        assert row["predicted_value_high"] == pytest.approx(row["predicted_value"])
        assert row["ltv_roi_low"] == pytest.approx(row["ltv_roi"])
    slower = LtvModel(BgNbd(0.25, 5.0, 0.8, 2.4), MODEL.spend, 7.0, 100.0, 400.0)
    spread = by_key(ltv_return(credits, costs, MODEL, 400, 364,
                               draws=[slower, MODEL]).rows)["last_click", "channel", "social"]
    slow = by_key(ltv_return(credits, costs, slower, 400, 364).rows)[
        "last_click", "channel", "social"]["predicted_value"]
    point = spread["predicted_value"]
    assert slow < point  # percentiles 5 and 95 of the two draws' values:
    assert spread["predicted_value_low"] == pytest.approx(slow + 0.05 * (point - slow))
    assert spread["predicted_value_high"] == pytest.approx(slow + 0.95 * (point - slow))
    assert spread["ltv_roi_high"] == pytest.approx(spread["predicted_value_high"] / 26.0)


def test_bootstrap_models_are_seeded_refits():
    orders = simulated(300, 1)
    ids, summaries = summaries_from_transactions(orders.user_id.to_numpy(object),
                                                 orders.day.to_numpy(float),
                                                 orders.revenue.to_numpy(float), 300.0)
    point = fit_model(summaries, 7.0, 300.0)
    models = bootstrap_models(summaries, 4, seed=3, point=point)
    assert len(models) == 4 and models == bootstrap_models(summaries, 4, seed=3, point=point)
    assert all(m.period_days == 7.0 and m.fitted_through_day == 300.0 for m in models)
    assert len({m.purchases.r for m in models}) == 4
    assert bootstrap_models(summaries, 0) == []


def test_segments_are_quantile_bands_with_ties_together():
    values = np.arange(1.0, 101.0)
    segments = ltv_segments(values)
    assert [int((segments == s).sum()) for s in ("low", "mid", "high", "top")] == \
        [50, 30, 15, 5]
    assert segments[49] == "low" and segments[50] == "mid" and segments[95] == "top"
    tied = ltv_segments(np.array([0.0] * 8 + [5.0, 9.0]))
    assert list(tied) == ["low"] * 8 + ["high", "top"]  # q50 = q80 = 0, q95 = 7.2
    assert list(ltv_segments(np.array([1.0, 2.0, 3.0, 4.0]), cuts=(0.5,),
                             names=("rest", "best"))) == ["rest", "rest", "best", "best"]
    assert list(assign_segments(np.array([1.0, 2.0, 3.0]), np.array([2.0]), ("a", "b"))) == \
        ["a", "a", "b"]  # on the threshold: below it
    with pytest.raises(ValueError, match="names"):
        ltv_segments(values, cuts=(0.5,))
    with pytest.raises(ValueError, match="increasing"):
        ltv_segments(values, cuts=(0.8, 0.5), names=("a", "b", "c"))


def test_the_scoring_frame():
    summaries = CustomerSummaries.of([0.0, 2.0, 5.0], [0.0, 4.0, 10.0], [2.0, 14.0, 12.0],
                                     [0.0, 25.0, 40.0])
    frame = score_customers(MODEL, np.array(["a", "b", "c"]), summaries, horizon_days=364)
    horizon = 364 / 7
    b = frame.set_index("user_id").loc["b"]
    assert (b.frequency, b.recency_days, b.age_days, b.monetary) == (2.0, 28.0, 98.0, 25.0)
    assert b.expected_purchases == pytest.approx(expected_purchases(horizon, 2, 4, 14))
    assert b.expected_order_value == pytest.approx((90 + 12 * 25) / (12 + 3))
    assert b.predicted_ltv == pytest.approx(b.expected_purchases * b.expected_order_value)
    alive = 1 / (1 + 0.8 / (2.4 + 1) * ((5 + 14) / (5 + 4)) ** 2.5)
    assert b.p_alive == pytest.approx(alive)
    assert frame.p_alive[0] == 1.0  # no repeat purchase: alive by the model's assumption
    assert list(frame.segment) == list(ltv_segments(frame.predicted_ltv.to_numpy()))


def test_the_tables_are_replaced_whole(url: str):
    with Warehouse(url) as wh:
        scores = score_customers(MODEL, np.array(["a", "b"]),
                                 CustomerSummaries.of([0.0, 2.0], [0.0, 4.0], [2.0, 14.0],
                                                      [0.0, 25.0]), 364)
        extra = {"as_of_day": "2026-10-01", "horizon_days": 364,
                 "fitted_through_day": "2026-09-30"}
        assert write_customer_ltv(wh, scores.assign(**extra)) == 2
        assert write_customer_ltv(wh, scores.iloc[1:].assign(**extra)) == 1
        (stored,) = wh.query("SELECT * FROM customer_ltv")
        assert stored[0] == "b" and stored[1] == "2026-10-01" and stored[-2] == 364
        assert stored[2:10] == pytest.approx(tuple(scores.iloc[1, 1:9]))
        credits, costs = hand_case()
        result = ltv_return(credits, costs, MODEL, 400, 364, draws=[MODEL])
        table = result.rows.assign(horizon_days=364, as_of_day="2026-10-01", currency="USD",
                                   gross_margin=1.0, level=0.9, computed_at="now")
        assert write_ltv_return(wh, table) == 8
        back = wh.query("SELECT * FROM ltv_return ORDER BY model, dimension, key")
        assert [r[:3] for r in back] == list(table[["model", "dimension", "key"]]
                                             .itertuples(index=False, name=None))
        assert [r[3:15] for r in back] == [
            pytest.approx(tuple(None if v is None else float(v) for v in r))
            for r in table.iloc[:, 3:15].itertuples(index=False, name=None)]
        assert write_ltv_calibration(wh, pd.DataFrame(
            [(0, 10, 0.5, 0.4, "2026-06-30", "2026-09-30", "now")],
            columns=list(rows.LTV_CALIBRATION.names))) == 1
        assert wh.query("SELECT frequency, customers FROM ltv_calibration") == [(0, 10)]


def test_refresh_ltv_end_to_end(url: str):
    orders = simulated(400, 7)
    with Warehouse(url) as wh:
        load(wh, orders)
        messages: list[str] = []
        summary = refresh_ltv(wh, horizon_days=365, rounds=5, progress=messages.append)
        assert any("bootstrap" in m for m in messages) and summary.fitted
        assert summary.as_of_day == day_of(day_start_ms("2026-01-01")
                                             + int(orders.day.max()) * DAY_MS)
        assert summary.customers == orders.user_id.nunique() == 400
        assert summary.segments == {"low": 200, "mid": 120, "high": 60, "top": 20}
        (stored,), = wh.query("SELECT COUNT(*) FROM customer_ltv")
        assert stored == 400 and summary.rounds == 5
        # every first order's cost, and every acquired customer, once per model
        first = orders[orders.stage == "new"]
        for model in ("last_click", "linear"):
            (customers, cost, revenue), = wh.query(
                "SELECT SUM(customers), SUM(acquisition_cost), SUM(first_order_revenue) "
                "FROM ltv_return WHERE model = ? AND dimension = 'channel'", (model,))
            assert customers == pytest.approx(len(first))
            assert cost == pytest.approx(12.5 * len(first))
            assert revenue == pytest.approx(first.revenue.sum())
            assert summary.totals[model]["acquisition_cost"] == pytest.approx(cost)
        low, value, high, roi, payback = wh.query(
            "SELECT predicted_value_low, predicted_value, predicted_value_high, ltv_roi, "
            "payback_days FROM ltv_return WHERE model = 'last_click' AND key = 'social'")[0]
        assert low <= high and value > 0 and roi == pytest.approx(value / (12.5 * (
            first.channel == "social").sum())) and payback == 0
        # an earlier day, the model given: the tables hold that refresh alone
        again = refresh_ltv(wh, model=summary.model, rounds=0, as_of="2026-03-01",
                            progress=messages.append)
        assert not again.fitted and again.model == summary.model
        (left,), = wh.query("SELECT COUNT(*) FROM customer_ltv")
        early = orders[orders.day <= 59]
        assert left == again.customers == early.user_id.nunique()
        assert wh.query("SELECT DISTINCT as_of_day, ltv_roi_low FROM ltv_return") == \
            [("2026-03-01", None)]


def test_refresh_ltv_says_what_is_missing(url: str):
    with Warehouse(url) as wh:
        with pytest.raises(ValueError, match="attribution_credits is empty"):
            refresh_ltv(wh)
        load(wh, simulated(20, 2).assign(user_id=""))
        assert credit_frame(wh).day.dtype == np.int64
        with pytest.raises(ValueError, match="no order of a known user"):
            refresh_ltv(wh)
        with pytest.raises(ValueError, match="horizon_days"):
            refresh_ltv(wh, horizon_days=0)
        with pytest.raises(ValueError, match="as_of"):
            refresh_ltv(wh, as_of="March")


def test_store_calibration(url: str):
    class Row:
        def __init__(self, frequency, customers, predicted, actual):
            self.frequency, self.customers = frequency, customers
            self.mean_predicted, self.mean_actual = predicted, actual

    with Warehouse(url) as wh:
        end = day_start_ms("2026-06-30") // DAY_MS
        assert store_calibration(wh, [Row(0, 100, 0.2, 0.25), Row(1, 0, math.nan, math.nan),
                                      Row(7, 3, 6.1, 5.0)], end, end + 91) == 2
        assert wh.query("SELECT * FROM ltv_calibration ORDER BY frequency")[1][:6] == \
            (7, 3, 6.1, 5.0, "2026-06-30", "2026-09-29")


def test_refresh_calibration_stores_the_holdout_check(url: str):
    orders = simulated(400, 7)
    with Warehouse(url) as wh:
        load(wh, orders)
        result = refresh_calibration(wh, calibration_weeks=26, holdout_weeks=17)
        stored = wh.query("SELECT * FROM ltv_calibration ORDER BY frequency")
        expected = result.comparison.by_frequency()
        assert [r[:4] for r in stored] == [
            (e.frequency, e.customers, pytest.approx(e.mean_predicted),
             pytest.approx(e.mean_actual)) for e in expected]
        assert sum(r[1] for r in stored) == len(result.comparison.ids)
        first = day_start_ms("2026-01-01") + int(orders.day.min()) * DAY_MS
        assert stored[0][4:6] == (day_of(first + 181 * DAY_MS),
                                  day_of(first + (181 + 17 * 7) * DAY_MS))


def test_a_model_without_finite_values_is_named():
    class Broken(LtvModel):
        def lifetime_value(self, summaries, horizon, discount_rate=0.0, step=1.0):
            return np.full(len(summaries), np.nan)

    broken = Broken(MODEL.purchases, MODEL.spend, 7.0, 10.0, 0.0)
    with pytest.raises(ValueError, match="'a' .* no finite value: BgNbd"):
        score_customers(broken, np.array(["a"]), CustomerSummaries.of([0.0], [0.0], [18.0]),
                        364)


def test_acquisition_cost_is_split_by_segment_weights_when_the_roi_job_used_them():
    """Two first orders share a campaign-day's spend; each also has a touch of a campaign
    without spend. By stage (both new) each order's ad spend goes to its spending touch;
    the split of a campaign's spend between the two orders follows segment weights only
    where cost_shares sees both orders' rows: the share within each order stays 1."""
    credits = pd.DataFrame([
        credit("linear", "a", "ua", 3, "new", "search", "gs", 0.5, 100.0),
        credit("linear", "a", "ua", 3, "new", "email", "", 0.5, 100.0),
        credit("linear", "b", "ub", 3, "new", "search", "gs", 0.25, 100.0),
        credit("linear", "b", "ub", 3, "new", "social", "fb", 0.75, 100.0)],
        columns=list(CREDIT_COLUMNS))
    spend = pd.DataFrame([(3, "gs", 80.0), (3, "fb", 30.0)], columns=["day", "campaign",
                                                                       "amount"])
    weights = SegmentWeights({"low": 0.25, "top": 1.0, "unknown": 0.2})
    by_stage = cost_shares(credits, spend, StageWeights())
    by_segment = cost_shares(credits, spend, StageWeights(), weights, {"a": "top", "b": "low"})
    # within each order the shares sum to 1 either way
    for shares in (by_stage, by_segment):
        assert shares.groupby(credits.order_id).sum().tolist() == pytest.approx([1.0, 1.0])
    # order b: gs rate 80 x w / (0.5 wa + 0.25 wb), fb rate 30 / 0.75 -- its gs row's share
    # of b's spend falls when b weighs less than a on gs
    gs_b = lambda shares: shares[2]  # noqa: E731
    assert gs_b(by_segment) < gs_b(by_stage)
    stage_rate = 80.0 / (0.5 + 0.25)
    segment_rate = 80.0 * 0.25 / (0.5 * 1.0 + 0.25 * 0.25)
    assert gs_b(by_stage) == pytest.approx(0.25 * stage_rate / (0.25 * stage_rate + 30.0))
    assert gs_b(by_segment) == pytest.approx(
        0.25 * segment_rate / (0.25 * segment_rate + 30.0))
