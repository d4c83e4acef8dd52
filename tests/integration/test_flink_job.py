"""End to end: OpenTelemetry SDK -> Kafka exporter -> Flink job -> result topics."""

from __future__ import annotations

import math

import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import count_messages
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import Plan, plan_events
from pipelines.store import summaries
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from tests.job_io import T0, D, H, S, credit_key, credit_rows, messages, order, publish, touch
from tests.reference import TEST_HORIZON_MS, reference_credits, reference_journeys

HAND_COMPUTED = Plan(events=[
    # a: three touches a minute apart, arriving out of order (within the allowed lateness)
    touch("a", T0 + 120 * S, "display"), touch("a", T0, "email"),
    touch("a", T0 + 60 * S, "paid_search"), order("a", T0 + H, "oA", 120.0),
    # b: the affiliate touch is 31 days before the order: outside the 30-day lookback
    touch("b", T0 + 2 * H, "affiliate"), touch("b", T0 + 31 * D, "email"),
    order("b", T0 + 31 * D + H, "oB", 50.0),
    # c: an order with no touch at all
    order("c", T0 + 32 * D, "oC", 20.0),
    # d: the same channel twice
    touch("d", T0 + 33 * D, "paid_social"), touch("d", T0 + 33 * D + S, "paid_social"),
    order("d", T0 + 33 * D + 2 * S, "oD", 10.0),
    # e: a repeat customer; the first order closes the first journey
    touch("e", T0 + 34 * D, "display"), order("e", T0 + 34 * D + H, "oE1", 30.0),
    touch("e", T0 + 35 * D, "email"), order("e", T0 + 35 * D + H, "oE2", 40.0),
    # f: broken at the source (negative revenue)
    order("f", T0 + 35 * D + 2 * H, "oF", -5.0, kind="invalid_conversion"),
    # d again, two days behind when it arrives: within the test's 3-day correction horizon,
    # it counts (waiting or, were the watermark past oD, re-crediting it)
    touch("d", T0 + 33 * D - H, "affiliate"),
    # a again, 35 days behind the watermark: beyond the horizon, late, must not change oA
    touch("a", T0 + 30 * 60 * S, "affiliate"),
], malformed=[b"this is not OTLP"])

EXPECTED = {
    ("last_click", "oA", 2, "display"): (1.0, 120.0),
    ("linear", "oA", 0, "email"): (1 / 3, 40.0),
    ("linear", "oA", 1, "paid_search"): (1 / 3, 40.0),
    ("linear", "oA", 2, "display"): (1 / 3, 40.0),
    ("last_click", "oB", 0, "email"): (1.0, 50.0),
    ("linear", "oB", 0, "email"): (1.0, 50.0),
    ("last_click", "oC", 0, "(unattributed)"): (1.0, 20.0),
    ("linear", "oC", 0, "(unattributed)"): (1.0, 20.0),
    ("last_click", "oD", 2, "paid_social"): (1.0, 10.0),
    ("linear", "oD", 0, "affiliate"): (1 / 3, 10 / 3),
    ("linear", "oD", 1, "paid_social"): (1 / 3, 10 / 3),
    ("linear", "oD", 2, "paid_social"): (1 / 3, 10 / 3),
    ("last_click", "oE1", 0, "display"): (1.0, 30.0),
    ("linear", "oE1", 0, "display"): (1.0, 30.0),
    ("last_click", "oE2", 0, "email"): (1.0, 40.0),
    ("linear", "oE2", 0, "email"): (1.0, 40.0),
}


def test_hand_computed_journeys_get_exact_credits(kafka, flink, job_config, tmp_path):
    job_config = job_config.replace("attribution", models=("last_click", "linear"))
    # a 3-day horizon: the touch of d two days behind corrects, the one of a 35 days behind
    # is late
    job_config = job_config.replace("journey", correction_days=3.0)
    publish(kafka, job_config.topics.spans, HAND_COMPUTED)
    run_job(job_config, kafka, env=flink.environment(job_config))

    credits = credit_rows(kafka, job_config.topics.credits)
    got = {credit_key(row): (row["credit"], row["revenue"]) for row in credits}
    stages = {row["order_id"]: row["stage"] for row in credits}
    assert stages == {"oA": "new", "oB": "new", "oC": "new", "oD": "new", "oE1": "new",
                      "oE2": "repeat"}
    assert len(credits) == len(got), "no duplicates"
    assert got.keys() == EXPECTED.keys()
    for key, (credit, revenue) in EXPECTED.items():
        assert math.isclose(got[key][0], credit, rel_tol=1e-12), key
        assert math.isclose(got[key][1], revenue, rel_tol=1e-12), key

    dead = messages(kafka, job_config.topics.dead_letter)
    assert sorted(d["reason"] for d in dead) == ["invalid_span", "malformed_otlp_proto"]
    malformed = next(d for d in dead if d["reason"] == "malformed_otlp_proto")
    assert malformed["payload_base64"] == "dGhpcyBpcyBub3QgT1RMUA=="  # the bytes, kept
    invalid = next(d for d in dead if d["reason"] == "invalid_span")
    assert "order.revenue is negative" in invalid["detail"]

    (late,) = messages(kafka, job_config.topics.late)
    assert (late["user_id"], late["channel"]) == ("a", "affiliate")

    # accounting: every record in is processed, dead-lettered, late or not for this job
    (report,) = [r for r in messages(kafka, job_config.topics.accounting) if r["final"]]
    valid = sum(e.kind in ("touchpoint", "conversion") for e in HAND_COMPUTED.events)
    assert report["messages"] == count_messages(kafka, job_config.topics.spans)
    assert (report["used"], report["late"], report["dead_lettered"]) == (valid, 1, 2)
    assert report["processed"] == valid - 1
    assert report["records_in"] == report["processed"] + report["late"] \
        + report["dead_lettered"] + report["other"]
    assert report["other"] > 0  # the checkout's database spans

    # and into the embedded warehouse, idempotently
    warehouse = Warehouse(f"sqlite:///{tmp_path / 'wh.db'}")
    messages_out = count_messages(kafka, job_config.topics.credits)
    assert 0 < messages_out < 6  # orders closed by one watermark share a message
    loader = TopicLoader(warehouse)
    assert loader.load_credits(kafka, job_config.topics.credits) == messages_out
    assert loader.load_credits(kafka, job_config.topics.credits) == 0  # resumes
    assert warehouse.query("SELECT COUNT(*) FROM attribution_credits") == [(len(EXPECTED),)]
    totals = {model: (orders, conv, rev)
              for model, orders, conv, rev in summaries.totals(warehouse)}
    for model in ("last_click", "linear"):
        orders, conversions, revenue = totals[model]
        assert orders == 6 and math.isclose(conversions, 6.0)
        assert math.isclose(revenue, 270.0)
    warehouse.close()


@pytest.mark.parametrize(("encoding", "buckets", "step_s", "mode"), [
    ("otlp_json", None, None, "thread"),
    # many buckets a subtask, watermark steps held 3 s apart by the source's grouping
    ("otlp_proto", 64, 3.0, "thread"),
    # the mode of the cluster config (jobs/config/cluster.yaml): a Python worker process
    # per slot, whose state and list APIs differ from thread mode's
    ("otlp_proto", 8, None, "process")])
def test_generated_population_matches_the_batch_reference(kafka, flink, job_config, topic,
                                                           encoding, buckets, step_s, mode):
    # every model; data-driven ones refitted every 6 hours, so many periods are exercised;
    # three partitions (the exporter spreads its messages over them) read by two subtasks
    job_config = job_config.replace("attribution", refit_every_s=6 * 3600.0)
    job_config = job_config.replace("topics", spans=topic("spans", 3))
    job_config = job_config.replace("flink", parallelism=2, python_execution_mode=mode)
    if buckets:
        job_config = job_config.replace("flink", user_buckets=buckets)
    if step_s:
        job_config = job_config.replace("flink", step_interval_s=step_s)
    plan = plan_events(400, seed=21)
    publish(kafka, job_config.topics.spans, plan, encoding=encoding)
    run_job(job_config, kafka, env=flink.environment(job_config))

    journeys = reference_journeys(plan)
    expected_stage = {j.conversion.order_id: j.stage for j in journeys}
    reference = reference_credits(plan, job_config.attribution.models, 6 * 3600.0)
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue for c in reference}
    assert {c.model for c in reference} == set(job_config.attribution.models)

    rows = credit_rows(kafka, job_config.topics.credits)
    got = {credit_key(r): r["revenue"] for r in rows}
    assert len(rows) == len(got), "no duplicates"
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
    # conservation per model and order
    per_order: dict[tuple[str, str], float] = {}
    for r in rows:
        per_order[r["model"], r["order_id"]] = per_order.get((r["model"], r["order_id"]), 0.0) \
            + r["credit"]
    assert all(math.isclose(v, 1.0, rel_tol=1e-9) for v in per_order.values())
    assert {r["order_id"]: r["stage"] for r in rows} == expected_stage
    assert {"new", "repeat"} <= set(expected_stage.values())
    invalid = sum(e.kind == "invalid_conversion" for e in plan.events)
    assert len(messages(kafka, job_config.topics.dead_letter)) == len(plan.malformed) + invalid
    assert len(messages(kafka, job_config.topics.late)) == late_beyond(plan, TEST_HORIZON_MS)
