"""The first README command: the whole path on the embedded default, start to finish.

stack up -> sample telemetry through the OpenTelemetry SDK (with two experiments: one with
a real lift, one without) -> the Flink jobs over it (bounded: attribution, GPU cost, ROI,
experiments) -> the warehouse loaded from the result topics -> per-channel summaries and
the experiments' strategy table.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from jobs.commands.verify import verify_warehouse
from jobs.demo_loop import run_control_loop, runaway_bid
from jobs.demo_report import (
    print_experiments,
    print_gpu_summary,
    print_roi_summary,
    print_summary,
)
from pipelines.codec.metrics import encode_samples
from pipelines.control.config import OutputsSection
from pipelines.flink.jobs import (
    ATTRIBUTION,
    EXPERIMENTS,
    GPU_COST,
    ROI,
    STREAMING_JOBS,
    StreamingJob,
    unique,
)
from pipelines.kafka.io import count_messages, producer, recreate_topics
from pipelines.settings.job_config import load_config
from pipelines.settings.paths import state_home
from pipelines.sources.ad_spend import SpendRecord
from pipelines.sources.generator import (
    ExperimentPlan,
    emit,
    gpu_samples,
    plan_events,
    plan_spend,
)
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.stack.local_kafka import LocalKafka
from pipelines.store.accounting import format_report, latest_report
from pipelines.store.warehouse import Warehouse

# The sample's experiments: a bidding strategy that earns a third more per order than the
# control (a real lift the strategy table should find) and a checkout copy that changes
# nothing (an A/A test in effect: "not significant" is the right answer).
DEMO_EXPERIMENTS = (
    ExperimentPlan("bidding-strategy", ("control", "v2.3-dynamic-bidding"), revenue_lift=0.35),
    ExperimentPlan("checkout-copy", ("control", "short-copy")),
)

# What the demo says it runs each streaming job for (after "Running the Flink <title> job").
DEMO_STEPS = {ATTRIBUTION.name: " until the sample is consumed",
              GPU_COST.name: " over the GPU samples and GPU-backed spans",
              ROI.name: ": spend and GPU cost allocated to the conversions",
              EXPERIMENTS.name: ": each user's first variant, their orders"}
CONTROL_TOPIC = OutputsSection.actions_topic  # the control loop's default

# The sample GPUs also run an hourly batch job that keeps them about half busy, so compute
# is a visible share of cost and so is their idle time.
DEMO_BATCH_BUSY = 0.5


def generate(bootstrap: str, topic: str, users: int, seed: int, days: int = 45,
             encoding: str = "otlp_proto", partition_by_trace: bool = False,
             experiments: tuple[ExperimentPlan, ...] = (), batch_busy: float = 0.0,
             client: dict[str, Any] | None = None) -> str:
    """`client`: kafka-python settings (security: pipelines.kafka.security.for_python)."""
    started = time.monotonic()
    plan = plan_events(users, seed=seed, days=days, experiments=experiments,
                       batch_busy=batch_busy)
    exporter = KafkaSpanExporter(bootstrap, topic, encoding=encoding,
                                 partition_by_trace=partition_by_trace, **(client or {}))
    raw = producer(bootstrap, **(client or {}))
    try:
        spans = emit(plan, exporter, lambda payload: raw.send(topic, payload).get(30),
                     seed=seed)
    finally:
        raw.close()
    kinds: dict[str, int] = defaultdict(int)
    for event in plan.events:
        kinds[event.kind] += 1
    return (f"generated {spans} spans for {users} users to {topic} in "
            f"{time.monotonic() - started:.1f}s: {kinds['touchpoint']} touchpoints, "
            f"{kinds['conversion']} orders, {kinds['invalid_conversion']} broken orders, "
            f"{kinds['exposure']} experiment exposures, "
            f"{plan.late_count} late touches, {len(plan.malformed)} malformed messages")


def publish_gpu_samples(bootstrap: str, topic: str, users: int, seed: int,
                        days: int = 45, experiments: tuple[ExperimentPlan, ...] = (),
                        batch_busy: float = 0.0) -> int:
    """The GPU samples that go with `generate`'s telemetry, as `seedance probe` sends them."""
    samples = gpu_samples(plan_events(users, seed=seed, days=days, experiments=experiments,
                                      batch_busy=batch_busy), seed=seed)
    raw = producer(bootstrap)
    try:
        for start in range(0, len(samples), 500):
            raw.send(topic, encode_samples(samples[start:start + 500])).get(30)
    finally:
        raw.close()
    return len(samples)


def publish_spend(bootstrap: str, topic: str, records: list[SpendRecord]) -> None:
    """Spend records (the plan's daily spend, a restatement) to the ad spend topic."""
    raw = producer(bootstrap)
    try:
        for record in records:
            raw.send(topic, record.to_json().encode(), key=record.key().encode())
        raw.flush()
    finally:
        raw.close()


def write_gpu_recording(path: Path, users: int, seed: int, days: int = 45,
                        experiments: tuple[ExperimentPlan, ...] = (),
                        batch_busy: float = 0.0) -> int:
    """The same GPU samples as a recording for `seedance probe --replay`."""
    samples = gpu_samples(plan_events(users, seed=seed, days=days, experiments=experiments,
                                      batch_busy=batch_busy), seed=seed)
    with path.open("w") as out:
        for sample in samples:
            out.write(json.dumps(sample._asdict()) + "\n")
    return len(samples)


def _step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.monotonic()


def _done(started: float) -> None:
    print(f"    done in {time.monotonic() - started:.1f}s", flush=True)


def demo_job_name(job: StreamingJob) -> str:
    """The Flink job name of `job` in the demo (its checkpoints apart from a real run's)."""
    return "seedance-demo" if job is ATTRIBUTION else f"seedance-demo-{job.name}"


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
        topics, gpu = config.topics, config.gpu
        recreate_topics(info.bootstrap, unique(
            [topic for job in STREAMING_JOBS.values() for topic in job.topics(config)]
            + [CONTROL_TOPIC]))
        (home / "demo" / "warehouse.db").unlink(missing_ok=True)

        t = _step(f"Generating sample telemetry for {users} users (seed {seed})")
        print("    " + generate(info.bootstrap, topics.spans, users=users, seed=seed,
                                 experiments=DEMO_EXPERIMENTS, batch_busy=DEMO_BATCH_BUSY))
        samples = publish_gpu_samples(info.bootstrap, gpu.metrics_topic, users, seed,
                                      experiments=DEMO_EXPERIMENTS, batch_busy=DEMO_BATCH_BUSY)
        print(f"    and {samples} GPU samples to {gpu.metrics_topic}")
        plan = plan_events(users, seed=seed, experiments=DEMO_EXPERIMENTS,
                           batch_busy=DEMO_BATCH_BUSY)
        spend = plan_spend(plan, seed=seed)  # the plan's daily spend, then the incident
        incident = runaway_bid(plan, spend)
        publish_spend(info.bootstrap, topics.ad_spend, spend + incident)
        print(f"    and {len(spend)} daily ad spend records to {topics.ad_spend}")
        if incident:
            print(f"    injected: a runaway bid on {incident[0].campaign}, its spend restated "
                  f"at ${sum(r.amount for r in incident):,.2f} over "
                  f"{incident[0].day} .. {incident[-1].day}")
        _done(t)

        for job in STREAMING_JOBS.values():
            t = _step(f"Running the Flink {job.title} job{DEMO_STEPS[job.name]}")
            job.run(config, info.bootstrap, job_name=demo_job_name(job))
            _done(t)
            report = latest_report(info.bootstrap, topics.accounting) \
                if job.keeps_accounting else None
            if report:
                print("    " + format_report(report, topics.dead_letter, topics.late))

        t = _step("Loading credits, GPU costs, spend, ROI and experiments into the warehouse")
        warehouse = Warehouse(config.warehouse.url)
        warehouse.load_credits(info.bootstrap, topics.credits)
        (rows,), = warehouse.query("SELECT COUNT(*) FROM attribution_credits")
        warehouse.load_gpu_costs(info.bootstrap, gpu.costs_topic)
        warehouse.load_spend(info.bootstrap, topics.ad_spend, config.roi.currency)
        warehouse.load_roi(info.bootstrap, topics.roi)
        for topic in (topics.experiment_exposures, topics.experiment_conversions):
            warehouse.load_experiments(info.bootstrap, topic)
        _done(t)
        dead = count_messages(info.bootstrap, topics.dead_letter)
        late = count_messages(info.bootstrap, topics.late)
        print_summary(warehouse)
        print_gpu_summary(warehouse)
        print_roi_summary(warehouse)
        print_experiments(warehouse, config)
        t = _step("Checking that every total ties out (seedance verify): ROI revenue = "
                  "credited revenue, spend and GPU cost = allocated + unallocated")
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
