"""ROI end to end: spans -> attribution job -> ROI job (with spend and GPU cost) -> roi_daily."""

from __future__ import annotations

import math

import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.flink.roi.job import run_roi_job
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from tests.job_io import latest, messages, publish, send
from tests.roi_scenario import DAY, SCENARIO, T0


def test_spend_and_compute_reach_roi_by_credit_and_stage(kafka, flink, job_config, topic,
                                                         tmp_path):
    config = job_config.replace("attribution", models=("last_click", "linear"))
    config = config.replace("gpu", costs_topic=topic("gpu-costs"))
    publish(kafka, config.topics.spans, SCENARIO)
    run_job(config, kafka, env=flink.environment(config))

    conversions = {c["order_id"]: c for c in messages(kafka, config.topics.conversions)}
    assert {k: (c["stage"], c["touches"]) for k, c in conversions.items()} == {
        "oA": ("new", 2), "oB0": ("new", 0), "oB": ("repeat", 1)}
    email_trace = conversions["oA"]["trace_ids"][1]  # [order trace, touch traces in order]
    end = int(T0 / 10**6) + 10_000
    send(kafka, config.gpu.costs_topic, [
        {"kind": "call", "trace_id": email_trace, "interval_end_ms": end, "cost_usd": 6.0},
        {"kind": "call", "trace_id": "f" * 32, "interval_end_ms": end, "cost_usd": 4.0},
        {"kind": "call", "trace_id": "", "interval_end_ms": end, "cost_usd": 1.0},
        {"kind": "idle", "gpu_uuid": "GPU-1", "interval_end_ms": end, "cost_usd": 9.0},
    ])
    spend = [{"platform": "google_ads", "account": "1", "campaign": "display-campaign",
              "day": DAY, "amount": 80.0, "currency": "USD"},
             {"platform": "meta", "account": "2", "campaign": "email-campaign", "day": DAY,
              "amount": 30.0, "currency": "USD"},
             {"platform": "meta", "account": "2", "campaign": "ghost", "day": DAY,
              "amount": 10.0, "currency": "USD"},
             # a restated report: the later record replaces the first
             {"platform": "google_ads", "account": "1", "campaign": "display-campaign",
              "day": DAY, "amount": 90.0, "currency": "USD"},
             {"platform": "meta", "account": "2", "campaign": "email-campaign", "day": DAY,
              "amount": 5.0, "currency": "EUR"},
             b'{"platform": "meta", "amount": "lots"',
             {"platform": "meta", "account": "2", "campaign": "x", "day": "2026-13-01",
              "amount": 1.0, "currency": "USD"}]
    send(kafka, config.topics.ad_spend, spend)
    run_roi_job(config, kafka, env=flink.environment(config))

    rows = latest(messages(kafka, config.topics.roi))

    def roi(model, dimension, key, day=DAY):
        return rows["roi", model, day, dimension, None, key]

    display = roi("last_click", "channel", "display")
    assert (display["revenue"], display["ad_spend"], display["compute_cost"]) == \
        pytest.approx((180.0, 90.0, 6.0))
    assert display["roi"] == pytest.approx(180 / 96)
    assert roi("last_click", "stage", "new")["ad_spend"] == pytest.approx(60.0)  # 0.6 : 0.3
    assert roi("last_click", "stage", "repeat")["ad_spend"] == pytest.approx(30.0)
    email = roi("linear", "channel", "email")
    assert (email["revenue"], email["ad_spend"], email["compute_cost"]) == \
        pytest.approx((60.0, 30.0, 3.0))
    assert roi("linear", "campaign", "display-campaign")["roi"] == pytest.approx(120 / 93)
    # the day without spend: revenue, no cost, no ROI figure
    earlier = roi("last_click", "channel", "(unattributed)", "2026-08-22")
    assert earlier["revenue"] == pytest.approx(20.0) and earlier["roi"] is None

    unallocated = {(k[1], k[4], k[5]): r["amount"] for k, r in rows.items()
                   if k[0] == "unallocated" and k[2] == DAY}
    assert unallocated == pytest.approx({
        ("last_click", "ad_spend", "email-campaign"): 30.0,
        ("last_click", "ad_spend", "ghost"): 10.0, ("linear", "ad_spend", "ghost"): 10.0,
        ("last_click", "compute", ""): 5.0, ("linear", "compute", ""): 5.0,
        # fully loaded compute: GPU-1's idle time served no call that day, so its cost
        # stays unallocated under the GPU (the calls above ran on no named GPU)
        ("last_click", "compute", "GPU-1"): 9.0, ("linear", "compute", "GPU-1"): 9.0})
    # conservation per model: allocated + unallocated = spend in (90 + 30 + 10)
    for model in ("last_click", "linear"):
        allocated = sum(r["ad_spend"] for k, r in rows.items()
                        if k[0] == "roi" and k[1] == model and k[3] == "channel")
        left = sum(a for (m, kind, _), a in unallocated.items() if m == model
                   and kind == "ad_spend")
        assert math.isclose(allocated + left, 130.0)

    # each order of the experiments' cost model (last_click) with its revenue and its share
    # of the cost: they add up to the model's day
    orders = {k[5]: r for k, r in rows.items() if k[0] == "order_cost" and k[2] == DAY}
    assert {r["model"] for r in orders.values()} == {"last_click"}
    day_rows = [r for k, r in rows.items() if k[0] == "roi" and k[1] == "last_click"
                and k[2] == DAY and k[3] == "channel"]
    for field in ("revenue", "ad_spend", "compute_cost"):
        assert math.isclose(sum(r[field] for r in orders.values()),
                            sum(r[field] for r in day_rows)), field
    # an order carries its whole journey's compute (the call on oA's email touch) under
    # any model; the models differ in how they split it between channels
    assert orders["oA"]["compute_cost"] == pytest.approx(6.0)

    dead = messages(kafka, config.topics.roi_dead_letter)  # pipelines/codec/dead_letters.py
    details = sorted(d["detail"] for d in dead)
    assert len(dead) == 3 and {d["reason"] for d in dead} == {"unusable_input"}
    assert any("reporting currency USD" in r for r in details)
    assert any(r.startswith("not JSON") for r in details)
    assert any("field 'day'" in r for r in details)
    assert all(d["payload_base64"] and not d["payload_truncated"] for d in dead)
    # each names where its input is: the spend topic (one partition), offsets 4 to 6
    assert sorted((d["source"], d["partition"], d["offset"]) for d in dead) == [
        (config.topics.ad_spend, 0, offset) for offset in (4, 5, 6)]

    warehouse = Warehouse(f"sqlite:///{tmp_path / 'wh.db'}")
    loader = TopicLoader(warehouse)
    loader.load_roi(kafka, config.topics.roi)
    loader.load_spend(kafka, config.topics.ad_spend)
    (row,) = warehouse.query("SELECT revenue, ad_spend, compute_cost, roi FROM roi_daily WHERE "
                             "model = 'last_click' AND day = ? AND dimension = 'channel' AND "
                             "key = 'display'", (DAY,))
    assert row == pytest.approx((180.0, 90.0, 6.0, 180 / 96))
    stored = dict(warehouse.query("SELECT order_id, ad_spend FROM order_costs "
                                  "WHERE model = 'last_click' AND day = ?", (DAY,)))
    assert stored == pytest.approx({o: r["ad_spend"] for o, r in orders.items()})
    spend_rows = warehouse.query("SELECT campaign, amount FROM ad_spend ORDER BY campaign")
    assert spend_rows == [("display-campaign", 90.0), ("email-campaign", 30.0), ("ghost", 10.0)]
    # the end of a bounded run closes every day it had input for, its rows and its compute
    assert warehouse.query("SELECT day, part FROM roi_days_closed ORDER BY day, part") == [
        (day, part) for day in sorted(("2026-08-22", DAY)) for part in ("compute", "rows")]
    warehouse.close()
