"""The experiments job on Flink: telemetry with two experiments (feature-flag exposures on
spans) through the attribution job and the experiments job, on 3 partitions at
parallelism 2. Every user keeps the variant of their first exposure (a later exposure to
another variant changes nothing), every order after the exposure counts for each flag,
and an exposure span without a variant is a dead letter with the reason."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime

import yaml

from jobs.cli import main
from pipelines.flink.attribution.job import run_job
from pipelines.flink.experiments.job import run_experiments_job
from pipelines.flink.roi.job import run_roi_job
from pipelines.kafka.io import producer, read_all
from pipelines.sources.expected import valid_events, valid_exposures
from pipelines.sources.generator import (
    ExperimentPlan,
    PlannedEvent,
    plan_events,
)
from pipelines.sources.plan_costs import plan_spend
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from tests.job_io import messages, publish

HOUR_NS = 3_600_000_000_000
EXPERIMENTS = (ExperimentPlan("bidding", ("control", "dynamic"), revenue_lift=0.3),
               ExperimentPlan("checkout-copy", ("control", "short", "long")))


def rows(kafka: str, topic: str) -> list[dict]:
    return [json.loads(value) for _, value in read_all(kafka, topic)]


def test_first_exposure_wins_and_later_orders_count(kafka, flink, job_config, topic, tmp_path,
                                                   capsys):
    plan = plan_events(150, seed=21, late_fraction=0.0, malformed_messages=0,
                       experiments=EXPERIMENTS)
    first = {(e.user_id, e.flag_key): (e.variant, e.ts_ns // 10**6)
             for e in valid_exposures(plan)}
    # a few users see the other variant later: they keep their first
    again = []
    for user, flag in sorted(first)[:10]:
        variant, ms = first[user, flag]
        other = next(v for e in EXPERIMENTS if e.flag_key == flag for v in e.variants
                     if v != variant)
        ts = (ms + 5) * 10**6 + HOUR_NS
        again.append(PlannedEvent("exposure", user, ts, flag_key=flag, variant=other,
                                  emit_rank=ts))
    broken = PlannedEvent("exposure", "user-000001", plan.events[50].ts_ns, flag_key="bidding",
                          variant="", emit_rank=plan.events[50].emit_rank + 1)
    plan = replace(plan, events=sorted([*plan.events, *again, broken],
                                       key=lambda e: e.emit_rank))
    spans = topic("spans", 3)
    publish(kafka, spans, plan)

    config = job_config.replace("topics", spans=spans)
    config = config.replace("flink", parallelism=2).replace("attribution",
                                                            models=("last_click",))
    run_job(config, kafka, env=flink.environment(config))
    run_experiments_job(config, kafka, env=flink.environment(config))

    exposures = rows(kafka, config.topics.experiment_exposures)
    got = {(r["user_id"], r["flag_key"]): (r["variant"], r["first_exposure_ms"])
           for r in exposures}
    assert len(got) == len(exposures)  # one row per user and flag
    assert got == first
    # keyed by row: every version of a row goes to one partition, in order
    keyed = [(tuple(json.loads(k)), (row["flag_key"], row["user_id"])) for k, row in
             ((k, json.loads(v)) for k, v in read_all(kafka, config.topics.experiment_exposures))]
    assert keyed and all(key == row for key, row in keyed)
    assert {tuple(json.loads(k)) for k, _ in
            read_all(kafka, config.topics.experiment_conversions)} == {
        (r["flag_key"], r["order_id"]) for r in rows(kafka, config.topics.experiment_conversions)}

    orders = [e for e in valid_events(plan) if e.kind == "conversion"]
    expected = {(flag, e.order_id): (first[e.user_id, flag][0], e.revenue)
                for e in orders for flag in ("bidding", "checkout-copy")
                if first[e.user_id, flag][1] <= e.ts_ns // 10**6}
    conversions = rows(kafka, config.topics.experiment_conversions)
    got_orders = {(r["flag_key"], r["order_id"]): (r["variant"], r["revenue"])
                  for r in conversions}
    assert len(got_orders) == len(conversions) and got_orders.keys() == expected.keys()
    assert all(got_orders[k][0] == v[0] and math.isclose(got_orders[k][1], v[1])
               for k, v in expected.items())
    # the lift is in the telemetry: the treated users' orders earn more on average
    mean = {v: sum(r for (f, _), (var, r) in expected.items() if f == "bidding" and var == v)
            / sum(1 for (f, _), (var, _r) in expected.items() if f == "bidding" and var == v)
            for v in ("control", "dynamic")}
    assert mean["dynamic"] > 1.1 * mean["control"]

    dead = [d for d in messages(kafka, config.topics.dead_letter)
            if "exposure" in d.get("detail", "")]
    assert len(dead) == 1 and "feature_flag.result.variant is missing" in dead[0]["detail"]

    # the strategy table from the warehouse: each variant's users and revenue as planned,
    # its cost the ROI job's allocation (last_click) of the plan's ad spend
    out = producer(kafka)
    for record in plan_spend(plan):
        out.send(config.topics.ad_spend, record.to_json().encode()).get(30)
    out.close()
    run_roi_job(config, kafka, env=flink.environment(config))
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    job_yaml = tmp_path / "job.yaml"
    job_yaml.write_text(yaml.safe_dump({"topics": {
        "experiment_exposures": config.topics.experiment_exposures,
        "experiment_conversions": config.topics.experiment_conversions,
        "roi": config.topics.roi}, "warehouse": {"url": url}}))
    with Warehouse(url) as warehouse:
        loader = TopicLoader(warehouse)
        for topic_name in (config.topics.experiment_exposures,
                           config.topics.experiment_conversions):
            loader.load_experiments(kafka, topic_name)
        loader.load_roi(kafka, config.topics.roi)
    capsys.readouterr()
    last_order_day = datetime.fromtimestamp(max(e.ts_ns for e in orders) / 1e9,
                                            UTC).strftime("%Y-%m-%d")
    assert main(["experiments", "--config", str(job_yaml), "--window-days", "60",
                 "--day", last_order_day]) == 0
    printed = capsys.readouterr().out
    assert "bidding" in printed and "dynamic" in printed and "control (control)" in printed
    with Warehouse(url) as warehouse:
        stored = {(f, v): (users, revenue, cost) for f, v, users, revenue, cost in
                  warehouse.query("SELECT flag_key, variant, users, revenue, "
                                  "ad_spend + compute_cost FROM experiment_results")}
        (allocated,) = warehouse.query("SELECT SUM(ad_spend) FROM order_costs")[0]
    planned_users = {}
    for (_, flag), (variant, _) in first.items():
        planned_users[flag, variant] = planned_users.get((flag, variant), 0) + 1
    planned_revenue = {}
    for (flag, _), (variant, revenue) in expected.items():
        planned_revenue[flag, variant] = planned_revenue.get((flag, variant), 0.0) + revenue
    assert {k: v[0] for k, v in stored.items()} == planned_users
    assert all(math.isclose(stored[k][1], planned_revenue.get(k, 0.0)) for k in stored)
    # every order's cost belongs to one variant of each experiment: the same total in each
    costs = {flag: sum(c for (f, _), (_, _, c) in stored.items() if f == flag)
             for flag in ("bidding", "checkout-copy")}
    assert allocated > 0 and math.isclose(costs["bidding"], costs["checkout-copy"])
