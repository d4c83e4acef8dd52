"""The first README command: the whole path on the embedded default, start to finish.

stack up -> sample telemetry through the OpenTelemetry SDK -> the Flink job over it
(bounded) -> the warehouse loaded from the result topic -> a per-channel summary.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

from pipelines.codec.metrics import encode_samples
from pipelines.kafka.io import count_messages, producer, recreate_topics
from pipelines.settings.job_config import load_config
from pipelines.settings.paths import state_home
from pipelines.sources.generator import emit, gpu_samples, plan_events, plan_spend
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.stack.local_kafka import LocalKafka
from pipelines.store.accounting import format_report, latest_report
from pipelines.store.warehouse import Warehouse


def generate(bootstrap: str, topic: str, users: int, seed: int, days: int = 45,
             encoding: str = "otlp_proto", partition_by_trace: bool = False) -> str:
    started = time.monotonic()
    plan = plan_events(users, seed=seed, days=days)
    exporter = KafkaSpanExporter(bootstrap, topic, encoding=encoding,
                                 partition_by_trace=partition_by_trace)
    raw = producer(bootstrap)
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
            f"{plan.late_count} late touches, {len(plan.malformed)} malformed messages")


def publish_gpu_samples(bootstrap: str, topic: str, users: int, seed: int,
                        days: int = 45) -> int:
    """The GPU samples that go with `generate`'s telemetry, as `seedance probe` sends them."""
    samples = gpu_samples(plan_events(users, seed=seed, days=days), seed=seed)
    raw = producer(bootstrap)
    try:
        for start in range(0, len(samples), 500):
            raw.send(topic, encode_samples(samples[start:start + 500])).get(30)
    finally:
        raw.close()
    return len(samples)


def publish_spend(bootstrap: str, topic: str, users: int, seed: int, days: int = 45) -> int:
    """Daily ad spend of the paid campaigns in `generate`'s telemetry."""
    records = plan_spend(plan_events(users, seed=seed, days=days), seed=seed)
    raw = producer(bootstrap)
    try:
        for record in records:
            raw.send(topic, record.to_json().encode())
        raw.flush()
    finally:
        raw.close()
    return len(records)


def write_gpu_recording(path: Path, users: int, seed: int, days: int = 45) -> int:
    """The same GPU samples as a recording for `seedance probe --replay`."""
    samples = gpu_samples(plan_events(users, seed=seed, days=days), seed=seed)
    with path.open("w") as out:
        for sample in samples:
            out.write(json.dumps(sample._asdict()) + "\n")
    return len(samples)


def _step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.monotonic()


def _done(started: float) -> None:
    print(f"    done in {time.monotonic() - started:.1f}s", flush=True)


def run_demo(users: int = 2000, seed: int = 7, keep_stack: bool = False) -> int:
    from pipelines.flink.attribution_job import run_job  # heavy imports: only when needed
    from pipelines.flink.gpu_cost_job import run_gpu_job
    from pipelines.flink.roi_job import run_roi_job

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
        topics, gpu = config.topics, config.gpu
        recreate_topics(info.bootstrap, [topics.spans, topics.credits, topics.dead_letter,
                                         topics.late, topics.conversions, topics.accounting,
                                         topics.ad_spend,
                                         topics.roi, topics.roi_dead_letter, gpu.metrics_topic,
                                         gpu.costs_topic, gpu.metrics_dead_letter])
        (home / "demo" / "warehouse.db").unlink(missing_ok=True)

        t = _step(f"Generating sample telemetry for {users} users (seed {seed})")
        print("    " + generate(info.bootstrap, topics.spans, users=users, seed=seed))
        samples = publish_gpu_samples(info.bootstrap, gpu.metrics_topic, users, seed)
        print(f"    and {samples} GPU samples to {gpu.metrics_topic}")
        spend = publish_spend(info.bootstrap, topics.ad_spend, users, seed)
        print(f"    and {spend} daily ad spend records to {topics.ad_spend}")
        _done(t)

        t = _step("Running the Flink attribution job until the sample is consumed")
        run_job(config, info.bootstrap, job_name="seedance-demo")
        _done(t)
        report = latest_report(info.bootstrap, topics.accounting)
        if report:
            print("    " + format_report(report, topics.dead_letter, topics.late))

        t = _step("Running the Flink GPU cost job over the GPU samples and GPU-backed spans")
        run_gpu_job(config, info.bootstrap, job_name="seedance-demo-gpu-cost")
        _done(t)

        t = _step("Running the Flink ROI job: spend and GPU cost allocated to the conversions")
        run_roi_job(config, info.bootstrap, job_name="seedance-demo-roi")
        _done(t)

        t = _step("Loading credits, GPU costs, spend and ROI into the warehouse")
        warehouse = Warehouse(config.warehouse.url)
        warehouse.load_credits(info.bootstrap, topics.credits)
        (rows,), = warehouse.query("SELECT COUNT(*) FROM attribution_credits")
        warehouse.load_gpu_costs(info.bootstrap, gpu.costs_topic)
        warehouse.load_spend(info.bootstrap, topics.ad_spend, config.roi.currency)
        warehouse.load_roi(info.bootstrap, topics.roi)
        _done(t)
        dead = count_messages(info.bootstrap, topics.dead_letter)
        late = count_messages(info.bootstrap, topics.late)
        print_summary(warehouse)
        print_gpu_summary(warehouse)
        print_roi_summary(warehouse)
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
    return 0


def _short(model: str) -> str:
    return {"shapley_simplified": "shapley_simpl", "position_based": "position"}.get(model, model)


def print_summary(warehouse: Warehouse) -> None:
    summary = warehouse.channel_summary()
    models = sorted({row[0] for row in summary})
    channels = sorted({row[1] for row in summary})
    revenue = {(m, c): rev for m, c, _, rev in summary}
    header = f"{'channel':16}" + "".join(f"{_short(m):>14}" for m in models)
    print("\nCredited revenue per channel, by attribution model")
    print(header)
    print("-" * len(header))
    for channel in sorted(channels, key=lambda c: -revenue.get((models[0], c), 0.0)):
        print(f"{channel:16}" + "".join(f"{revenue.get((m, channel), 0.0):14,.2f}"
                                        for m in models))
    print("-" * len(header))
    totals = {m: (o, c, r) for m, o, c, r in warehouse.totals()}
    print(f"{'total':16}" + "".join(f"{totals[m][2]:14,.2f}" for m in models))
    print(f"{'conversions':16}" + "".join(f"{totals[m][1]:14,.2f}" for m in models))
    stages = warehouse.stage_summary()
    print("Orders by lifecycle stage: " + ", ".join(
        f"{stage} {orders}" for model, stage, orders, _ in stages if model == models[0]))


def print_roi_summary(warehouse: Warehouse, models: tuple[str, ...] = ("last_click", "linear",
                                                                      "shapley", "markov")
                      ) -> None:
    rows = warehouse.roi_summary("channel")
    if not rows:
        return
    print("\nROI per channel over the whole period = revenue / (ad spend + GPU compute); "
          "'-': cost under 1")
    print(f"{'channel':16}" + "".join(f"{m:>12}" for m in models) + f"{'ad spend':>12}"
          f"{'compute':>10}")
    by_key = {(m, k): (rev, spend, compute) for m, k, rev, spend, compute in rows}
    for channel in sorted({k for _, k in by_key}):
        figures = []
        for model in models:
            rev, spend, compute = by_key.get((model, channel), (0.0, 0.0, 0.0))
            cost = spend + compute
            # below one currency unit of cost a ratio says nothing (unpaid channels)
            figures.append(f"{rev / cost:12,.2f}" if cost >= 1.0 else f"{'-':>12}")
        _, spend, compute = by_key.get((models[0], channel), (0.0, 0.0, 0.0))
        print(f"{channel:16}" + "".join(figures) + f"{spend:12,.2f}{compute:10,.4f}")
    unallocated = warehouse.query(
        "SELECT cost_kind, SUM(amount) FROM roi_unallocated WHERE model = ? GROUP BY cost_kind "
        "ORDER BY cost_kind", (models[0],))
    if unallocated:
        print(f"Unallocated under {models[0]}: " + ", ".join(
            f"{kind} ${amount:,.2f}" for kind, amount in unallocated)
            + " (no credited conversion of that campaign that day / GPU work outside journeys)")


def print_gpu_summary(warehouse: Warehouse) -> None:
    summary = warehouse.gpu_cost_summary()
    print("\nGPU compute cost per workload")
    for namespace, workload, seconds, usd in summary["per_workload"]:  # type: ignore[union-attr]
        print(f"  {namespace + '/' if namespace else ''}{workload:24} {seconds:10.1f} GPU-s "
              f"  ${usd:,.4f}")
    print("Costliest traces")
    for trace_id, user, usd in summary["top_traces"]:  # type: ignore[union-attr]
        print(f"  {trace_id}  {user:12} ${usd:,.6f}")
    print("Idle cost per GPU")
    for uuid, model, seconds, usd in summary["idle_per_gpu"]:  # type: ignore[union-attr]
        print(f"  {uuid} {model:22} {seconds:10.0f} s   ${usd:,.4f}")
    allocated, idle, total = (summary["allocated_usd"], summary["idle_usd"],
                              summary["interval_usd"])
    print("Idle cost shared over workloads by their allocated cost (as OpenCost does)")
    for workload, usd in summary["idle_shared"]:  # type: ignore[union-attr]
        print(f"  {workload:24} ${usd:,.4f}")
    print(f"Allocated ${allocated:,.4f} + idle ${idle:,.4f} = ${allocated + idle:,.4f}; "
          f"sampled GPU time cost ${total:,.4f}")
