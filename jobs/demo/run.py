"""The first README command: the whole path on the embedded default, start to finish.

stack up -> sample telemetry through the OpenTelemetry SDK (with two experiments: one with
a real lift, one without; repeat orders from a known buying process per acquisition
channel) -> the Flink jobs over it (bounded: attribution, GPU cost, ROI,
experiments, LTV) -> the warehouse loaded from the result topics -> per-channel summaries and
the experiments' strategy table.
"""

from __future__ import annotations

import time

from jobs.commands.experiments import incrementality_report
from jobs.commands.ltv_return import report_lines
from jobs.commands.report import (
    print_experiments,
    print_gpu_summary,
    print_roi_summary,
    print_summary,
)
from jobs.commands.verify import verify_warehouse
from jobs.demo.loop import run_control_loop, runaway_bid
from jobs.demo.steps import DEMO_STEPS, demo_job_name
from pipelines.control.config import OutputsSection
from pipelines.flink.jobs import (
    LTV,
    STREAMING_JOBS,
    topic_settings,
    unique,
)
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, count_messages, recreate_topics
from pipelines.ltv.publish import fit_and_publish
from pipelines.ltv.report import refresh_ltv
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.settings.paths import PROJECT_ROOT, state_home
from pipelines.sources.generator import plan_events
from pipelines.sources.holdouts import DEMO_HOLDOUTS, holdout_truths, with_holdouts
from pipelines.sources.order_table import (
    TableChanges,
    publish_table_changes,
    table_changes,
)
from pipelines.sources.plan_costs import plan_spend
from pipelines.sources.publish import (
    DEMO_EXPERIMENTS,
    generated_summary,
    publish_gpu_samples,
    publish_plan,
    publish_spend,
)
from pipelines.sources.repeat_buying import DEMO_REPEAT_BUYING
from pipelines.stack.local_kafka import LocalKafka
from pipelines.store.accounting import format_report, latest_report
from pipelines.store.incrementality import refresh as refresh_incrementality
from pipelines.store.loading import TopicLoader
from pipelines.store.ltv import ltv_return_frame
from pipelines.store.summaries import credit_row_count, order_totals
from pipelines.store.warehouse import Warehouse

CONTROL_TOPIC = OutputsSection.actions_topic  # the control loop's default

# The sample GPUs also run an hourly batch job that keeps them about half busy, so compute
# is a visible share of cost and so is their idle time.
DEMO_BATCH_BUSY = 0.5
# the orders table's change stream beside the spans: every order inserted, and refunds
DEMO_ORDER_CHANGES = "shop.shop.orders"
DEMO_REFUNDS = 0.05  # of the orders, refunded days later (whole, or half of it)
DEMO_LTV_ROUNDS = 50  # bootstrap refits behind the LTV ROI intervals (a few seconds)


def _step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.monotonic()


def _done(started: float) -> None:
    print(f"    done in {time.monotonic() - started:.1f}s", flush=True)


def print_ltv(warehouse: Warehouse) -> None:
    """The warehouse's LTV refresh (customer_ltv, ltv_return) and each channel's first-order
    ROI beside its LTV-based ROI; a sample too small to fit says why instead."""
    try:
        refresh = refresh_ltv(warehouse, rounds=DEMO_LTV_ROUNDS, progress=lambda _: None)
    except ValueError as error:
        print(f"    skipped: {error}")
        return
    for line in report_lines(refresh, ltv_return_frame(warehouse), "last_click", 0.9):
        print(f"    {line}" if line else "")


def print_refunds(warehouse: Warehouse, changes: TableChanges, placed: float) -> None:
    """What the orders table's refunds did: the orders' revenue is net of them."""
    net, orders = order_totals(warehouse)
    refunded = sum(refund.refunded for refund in changes.refunds)
    ties = abs(placed - refunded - float(net)) < 0.005
    print(f"\nRefunds from the orders table: {len(changes.refunds)} of {orders:,} orders; "
          f"placed ${placed:,.2f} - refunded ${refunded:,.2f} = ${float(net):,.2f}, the "
          f"orders' revenue in the warehouse{'' if ties else ' (DOES NOT TIE)'}: every "
          "model's credits, the ROI, the experiments and the LTV carry it net")


def print_incrementality(warehouse: Warehouse, config: StreamingJobConfig) -> None:
    """`seedance incrementality` on the demo's holdouts: ROI per channel calibrated beside
    uncalibrated, under the experiments' cost model."""
    settings, alpha = config.incrementality, config.experiments.alpha
    result = refresh_incrementality(
        warehouse, [], settings.holdout_prefix, settings.exposed_variant,
        settings.held_out_variant, alpha, config.roi.min_cost, config.roi.currency,
        config.experiment_cost_model)
    if isinstance(result, str):
        print(f"    {result}")
        return
    report = incrementality_report(result.measures, result.calibrated,
                                   config.experiment_cost_model, result.first, result.last,
                                   alpha, result.savings)
    print("\n".join("    " + line for line in report.splitlines()))
    for reason in result.skipped:
        print(f"    not measured: {reason}")


def run_demo(users: int = 2000, seed: int = 7, keep_stack: bool = False) -> int:
    home = state_home()
    kafka = LocalKafka(home / "kafka")
    started_here = kafka.info() is None
    t = _step("Starting the local Kafka broker (KRaft)")
    info = kafka.up()
    _done(t)
    try:
        config = load_config().replace("input", bounded=True, starting_offsets="earliest",
                                       group_id="seedance-demo")
        config = config.replace("flink", checkpoint_interval_s=2.0, resume=False,
                                checkpoint_dir=str(home / "demo" / "checkpoints"))
        config = config.replace("warehouse", url=f"sqlite:///{home / 'demo' / 'warehouse.db'}")
        # the generated GPUs are sampled once a minute around their calls
        config = config.replace("gpu", nominal_interval_s=60.0, max_gap_s=60.0)
        # the strategy table over the whole sample: a 7-day window of 2,000 users holds
        # about 200 per variant, too few to tell a third more revenue per order from noise
        config = config.replace("experiments", window_days=45.0)
        # the orders also come from the shop's table (Debezium), refunds with them
        config = config.replace("order_changes", topic=DEMO_ORDER_CHANGES,
                                mapping=str(PROJECT_ROOT / "jobs" / "config" /
                                            "order_changes.yaml"))
        topics, gpu = config.topics, config.gpu
        recreate_topics(info.bootstrap, unique(
            [topic for job in STREAMING_JOBS.values() for topic in job.topics(config)]
            + [CONTROL_TOPIC, DEMO_ORDER_CHANGES]),
            settings={**topic_settings(STREAMING_JOBS.values(), config),
                      topics.spans: SAMPLE_SPANS_TOPIC, DEMO_ORDER_CHANGES: SAMPLE_SPANS_TOPIC})
        (home / "demo" / "warehouse.db").unlink(missing_ok=True)

        t = _step(f"Generating sample telemetry for {users} users (seed {seed})")
        # one plan: its spans, the GPU samples of its GPU calls and its daily spend
        plan = plan_events(users, seed=seed, experiments=DEMO_EXPERIMENTS,
                           batch_busy=DEMO_BATCH_BUSY, repeat_buying=DEMO_REPEAT_BUYING)
        # one holdout per paid channel: lift tests whose answer the plan knows
        truths = holdout_truths(plan, DEMO_HOLDOUTS, seed)
        plan = with_holdouts(plan, DEMO_HOLDOUTS, seed)
        spans = publish_plan(plan, info.bootstrap, topics.spans, seed=seed)
        print("    " + generated_summary(plan, spans, users, topics.spans,
                                         time.monotonic() - t))
        samples = publish_gpu_samples(plan, info.bootstrap, gpu.metrics_topic, seed)
        print(f"    and {samples} GPU samples to {gpu.metrics_topic}")
        spend = plan_spend(plan, seed=seed)  # the plan's daily spend, then the incident
        incident = runaway_bid(plan, spend)
        publish_spend(info.bootstrap, topics.ad_spend, spend + incident)
        print(f"    and {len(spend)} daily ad spend records to {topics.ad_spend}")
        orders = [e for e in plan.events if e.kind == "conversion"]
        changes = table_changes(orders, DEMO_REFUNDS, seed)
        publish_table_changes(changes, info.bootstrap, DEMO_ORDER_CHANGES)
        print(f"    and {len(changes.events)} change events of the orders table to "
              f"{DEMO_ORDER_CHANGES} (Debezium): every order again, and "
              f"{len(changes.refunds)} refunds of ${sum(r.refunded for r in changes.refunds):,.2f}")
        if incident:
            print(f"    injected: a runaway bid on {incident[0].campaign}, its spend restated "
                  f"at ${sum(r.amount for r in incident):,.2f} over "
                  f"{incident[0].day} .. {incident[-1].day}")
        _done(t)

        from pipelines.flink.runtime.kafka import run_job  # PyFlink: loaded when run

        for job in STREAMING_JOBS.values():
            if job.name == LTV.name:  # as a scheduled `seedance ltv fit --publish` would
                t = _step("Fitting BG/NBD and Gamma-Gamma on the orders so far, published to "
                          f"{topics.ltv_models}")
                try:
                    message, fitted = fit_and_publish(info.bootstrap, config)
                    print(f"    {fitted:,} customers; segments {'/'.join(message.names)} at "
                          + ", ".join(f"{bound:,.2f}" for bound in message.bounds))
                except ValueError as error:  # too small a sample: the job keeps the orders
                    print(f"    no model published: {error}")
                _done(t)
            t = _step(f"Running the Flink {job.title} job{DEMO_STEPS[job.name]}")
            run_job(job, config, info.bootstrap, job_name=demo_job_name(job))
            _done(t)
            if job.name == LTV.name:
                print(f"    {count_messages(info.bootstrap, topics.customer_ltv):,} customer "
                      f"scores on {topics.customer_ltv}")
            report = latest_report(info.bootstrap, topics.accounting) \
                if job.keeps_accounting else None
            if report:
                print("    " + format_report(report, topics.dead_letter, topics.late))

        t = _step("Loading credits, GPU costs, ROI, spend, experiments and customer LTV into "
                  "the warehouse")
        warehouse = Warehouse(config.warehouse.url)
        TopicLoader(warehouse).load_all(info.bootstrap, config)  # what `seedance load` loads
        rows = credit_row_count(warehouse)
        _done(t)
        dead = count_messages(info.bootstrap, topics.dead_letter)
        late = count_messages(info.bootstrap, topics.late)
        print_summary(warehouse)
        print_gpu_summary(warehouse)
        print_roi_summary(warehouse)
        print_refunds(warehouse, changes, sum(order.revenue for order in orders))
        t = _step("Incrementality: one holdout per paid channel (10 % of its audience kept "
                  "from it), each channel's credit calibrated to what it caused")
        print_incrementality(warehouse, config)
        print("    what the sample's channels caused in their exposed users (the plan knows "
              "it): " + ", ".join(f"{channel} {orders:,.0f} orders"
                                  for channel, orders in truths.items()))
        _done(t)
        print_experiments(warehouse, config)
        t = _step("Customer lifetime value: BG/NBD and Gamma-Gamma fitted on the warehouse's "
                  "customers, what each channel's acquired customers are worth in a year")
        print_ltv(warehouse)
        _done(t)
        t = _step("Checking that every total ties out (seedance verify): ROI revenue = "
                  "credited revenue = the orders' revenue net of refunds, spend and GPU "
                  "cost = allocated + unallocated, the LTV return's customers, revenue "
                  "and cost = its first orders'")
        broken = verify_warehouse(config.warehouse.url, config.roi.currency, indent="    ",
                                  fully_loaded=config.computation.fully_loaded)
        _done(t)
        t = _step("The control loop (auto) on the injected runaway bid and a hot GPU pool")
        run_control_loop(info.bootstrap, config, warehouse, CONTROL_TOPIC)
        _done(t)
        warehouse.close()
        print(f"\n{rows:,} credit rows; {dead} dead letters in '{topics.dead_letter}'; "
              f"{late} late events in '{topics.late}' (both jobs': the GPU cost job's late "
              "samples and calls go there too).")
        print(f"Results: Kafka topic '{topics.credits}' on {info.bootstrap}"
              + (" (broker left running)" if keep_stack or not started_here else "")
              + f"\n         warehouse {warehouse.path} (tables attribution_credits, "
              "roi_daily, ...)"
              + f"\n         see them: .venv/bin/seedance dashboard --warehouse "
              f"sqlite:///{warehouse.path}")
    finally:
        if started_here and not keep_stack:
            kafka.down()
            print("Kafka broker stopped.")
    return 1 if broken else 0
