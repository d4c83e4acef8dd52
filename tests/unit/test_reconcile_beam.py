"""The reconciliation transform on in-memory collections (Beam DirectRunner, no services):
time zones, campaign ownership, GPU resource mapping, coverage, totals, alert decisions."""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that

from pipelines.reconcile.beam import Inputs, Settings, reconcile
from pipelines.reconcile.store import AlertSinks
from udfs.reconcile.drift import METRICS, Rule

D1, D2 = "2025-03-01", "2025-03-02"
H = 3_600_000
MIDNIGHT_D2_UTC = 1_740_873_600_000  # 2025-03-02T00:00Z
G = ("google_ads", "1234567890")
RULES = {m: Rule(0.05, 1.0) for m in METRICS}


def settings(**changes):
    values = dict(first=D1, last=D2, rules=RULES, resource_map={"GPU-A": "vm-1", "GPU-B": "vm-1"},
                  time_zones={G: "America/New_York"}, run_id="run-1", raised_at="t0",
                  sinks=AlertSinks(log=True, kafka=True, webhook=False))
    values.update(changes)
    return Settings(**values)


def credit(campaign, order, ts_ms, revenue=10.0, currency="USD"):
    return (campaign, order, ts_ms, 1.0, revenue, currency)


def run(inputs, check, s=None):
    """Build the pipeline from dict inputs; `check` gets the materialised outputs."""
    s = s or settings()
    with BeamPipeline() as p:
        def create(name):
            return p | name >> beam.Create(inputs.get(name, []))
        outputs = reconcile(Inputs(*(create(n) for n in Inputs._fields)), s)
        collected = (
            (outputs.comparisons | "C" >> beam.Map(lambda c: ("comparison", c)),
             outputs.alerts | "A" >> beam.Map(lambda a: ("alert", a)),
             outputs.by_day | "D" >> beam.Map(lambda d: ("day", d)))
            | beam.Flatten() | beam.combiners.ToList())
        assert_that(collected, check)


def by_key(items):
    return {tuple(c.key): c for kind, c in items if kind == "comparison"}


BASE = {
    "spend": [(*G, "111", D1, 100.0, "USD"), (*G, "111", D2, 50.0, "USD")],
    "campaign_accounts": [("111", *G), ("222", *G), ("222", "meta", "9"), ("111", *G)],
    # 22:00 in New York on D1 is 03:00 UTC on D2: it counts on the account's D1
    "credits": [credit("111", "o1", MIDNIGHT_D2_UTC - 9 * H),
                credit("111", "o2", MIDNIGHT_D2_UTC + 3 * H),
                credit("111", "o5", MIDNIGHT_D2_UTC + 15 * H),  # D2 in New York
                credit("222", "o3", MIDNIGHT_D2_UTC - 21 * H),  # two accounts: skipped
                credit("(unattributed)", "o4", MIDNIGHT_D2_UTC - 21 * H)],
    "their_ads": [(*G, "111", D1, "USD", 100.0, 2.0, 20.0, "interaction", "g.json:1", "r1"),
                  (*G, "111", D2, "USD", 50.0, None, None, "interaction", "g.json:2", "r1")],
    # GPU-A 20:00..04:00 crosses midnight; both GPUs are one VM on the bill
    "gpu_costs": [("GPU-A", MIDNIGHT_D2_UTC - 4 * H, MIDNIGHT_D2_UTC + 4 * H, 8.0, "ranker"),
                  ("GPU-B", MIDNIGHT_D2_UTC - 2 * H, MIDNIGHT_D2_UTC - H, 1.0, "(idle)")],
    "their_cloud": [("vm-1", D1, "USD", 5.0, "focus.csv", "r2", "Usage"),
                    ("vm-1", D1, "USD", 0.4, "focus.csv", "r2", "Tax"),
                    ("vm-9", D1, "USD", 99.0, "focus.csv", "r2", "Usage"),
                    ("vm-1", D2, "USD", 4.0, "focus.csv", "r2", "Usage")],
}


def test_keys_days_zones_and_resources():
    def check(outputs):
        (items,) = outputs
        rows = by_key(items)
        conv = rows[("campaign", *G, "111", D1, "conversions")]
        assert (conv.ours, conv.theirs, conv.status) == (2.0, 2.0, "ok")
        assert {c.name for c in conv.contributors} == {"o1", "o2"}
        # D2's report row does not carry conversions: our D2 credit is not compared
        assert rows[("campaign", *G, "111", D2, "conversions")].status == "no_report"
        gpu1 = rows[("gpu", "", "", "vm-1", D1, "compute_cost")]
        assert gpu1.ours == pytest.approx(5.0) and gpu1.theirs == pytest.approx(5.0)
        assert gpu1.status == "ok" and gpu1.contributors[0].name == "ranker"
        gpu2 = rows[("gpu", "", "", "vm-1", D2, "compute_cost")]
        assert (gpu2.ours, gpu2.theirs) == (pytest.approx(4.0), 4.0)
        assert not any(k[3] == "vm-9" for k in rows)  # not one of our GPUs' resources
        assert not any(k[3] in ("222", "(unattributed)") for k in rows)
        total = rows[("total", "*", "*", "*", D1, "spend")]
        assert (total.ours, total.theirs, total.currency) == (100.0, 100.0, "USD")
        assert not [a for kind, a in items if kind == "alert"]
        days = {payload[0] for kind, payload in items if kind == "day"}
        assert days == {D1, D2}

    run(BASE, check)


def test_a_breach_opens_and_history_decides_what_is_new():
    inputs = dict(BASE)
    inputs["their_ads"] = [(*G, "111", D1, "USD", 100.0, 1.0, 10.0, "interaction", "g", "r1")]
    inputs["gpu_costs"], inputs["their_cloud"] = [], []
    # stored history: spend of D1 was open (now fine -> resolve); a key that is gone
    # entirely (-> resolve); revenue already open and still breaching (-> nothing new,
    # but the day's revenue total opens)
    inputs["alert_events"] = [("campaign", *G, "111", D1, "spend", "open", 1),
                              ("campaign", *G, "999", D1, "spend", "open", 1),
                              ("campaign", *G, "111", D1, "revenue", "open", 1)]

    def check(outputs):
        (items,) = outputs
        alerts = sorted((a[1], a[5], a[7], a[8]) for kind, a in items if kind == "alert")
        assert alerts == [("open", "*", "conversions", 1), ("open", "*", "revenue", 1),
                          ("open", "111", "conversions", 1), ("resolve", "111", "spend", 1),
                          ("resolve", "999", "spend", 1)]
        opened = next(a for kind, a in items if kind == "alert" and a[1] == "open")
        assert opened[18:21] == ("pending", "pending", "disabled")  # log, kafka, webhook

    run(inputs, check)


def test_one_day_range_and_empty_inputs_still_visit_the_day():
    def check(outputs):
        (items,) = outputs
        assert [d for kind, d in items if kind == "day"] == [(D1, [])]

    run({}, check, settings(last=D1))
