"""The first README command: the whole path on the embedded default, start to finish.

stack up -> sample telemetry through the OpenTelemetry SDK -> the Flink job over it
(bounded) -> the warehouse loaded from the result topic -> a per-channel summary.
"""

from __future__ import annotations

import time
from collections import defaultdict

from pipelines.config import load_config
from pipelines.generator import emit, plan_events
from pipelines.kafka_exporter import KafkaSpanExporter
from pipelines.kafka_io import count_messages, producer, recreate_topics
from pipelines.local_stack import LocalKafka
from pipelines.paths import state_home
from pipelines.warehouse import Warehouse


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


def _step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.monotonic()


def _done(started: float) -> None:
    print(f"    done in {time.monotonic() - started:.1f}s", flush=True)


def run_demo(users: int = 2000, seed: int = 7, keep_stack: bool = False) -> int:
    from pipelines.flink_job import run_job  # heavy import: only when needed

    home = state_home()
    kafka = LocalKafka(home / "kafka")
    started_here = kafka.info() is None
    t = _step("Starting the local Kafka broker (KRaft)")
    info = kafka.up()
    _done(t)
    try:
        config = load_config().replace("input", bounded=True, starting_offsets="earliest",
                                       group_id="seedance-demo")
        config = config.replace("flink", checkpoint_interval_s=2.0,
                                checkpoint_dir=str(home / "demo" / "checkpoints"))
        config = config.replace("warehouse", url=f"sqlite:///{home / 'demo' / 'warehouse.db'}")
        topics = config.topics
        recreate_topics(info.bootstrap, [topics.spans, topics.credits, topics.dead_letter,
                                         topics.late])
        (home / "demo" / "warehouse.db").unlink(missing_ok=True)

        t = _step(f"Generating sample telemetry for {users} users (seed {seed})")
        print("    " + generate(info.bootstrap, topics.spans, users=users, seed=seed))
        _done(t)

        t = _step("Running the Flink attribution job until the sample is consumed")
        run_job(config, info.bootstrap, job_name="seedance-demo")
        _done(t)

        t = _step("Loading the credits into the warehouse")
        warehouse = Warehouse(config.warehouse.url)
        rows = warehouse.load_credits(info.bootstrap, topics.credits)
        _done(t)
        dead = count_messages(info.bootstrap, topics.dead_letter)
        late = count_messages(info.bootstrap, topics.late)
        print_summary(warehouse)
        warehouse.close()
        print(f"\n{rows} credit rows; {dead} dead letters in '{topics.dead_letter}'; "
              f"{late} late events in '{topics.late}'.")
        print(f"Results: Kafka topic '{topics.credits}' on {info.bootstrap}"
              + (" (broker left running)" if keep_stack or not started_here else "")
              + f"\n         warehouse {warehouse.path} (table attribution_credits)")
    finally:
        if started_here and not keep_stack:
            kafka.down()
            print("Kafka broker stopped.")
    return 0


def print_summary(warehouse: Warehouse) -> None:
    summary = warehouse.channel_summary()
    models = sorted({row[0] for row in summary})
    channels = sorted({row[1] for row in summary})
    values = {(m, c): (conv, rev) for m, c, conv, rev in summary}
    header = f"{'channel':18}" + "".join(f"{m + ' conv':>16}{m + ' revenue':>20}" for m in models)
    print("\nCredited conversions and revenue per channel and model")
    print(header)
    print("-" * len(header))
    for channel in sorted(channels, key=lambda c: -values.get((models[0], c), (0, 0))[1]):
        line = f"{channel:18}"
        for model in models:
            conv, rev = values.get((model, channel), (0.0, 0.0))
            line += f"{conv:16.2f}{rev:20,.2f}"
        print(line)
    print("-" * len(header))
    totals = {m: (o, c, r) for m, o, c, r in warehouse.totals()}
    line = f"{'total':18}"
    for model in models:
        _, conv, rev = totals[model]
        line += f"{conv:16.2f}{rev:20,.2f}"
    print(line)
