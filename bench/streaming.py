"""Attribution job throughput: spans per second through Kafka + Flink, beside a plain Kafka
consumer that only decodes the same messages (the ceiling).

Starts its own Kafka broker in a temporary folder, publishes the sample population (made
with the OpenTelemetry SDK and the project's span exporter, 500 spans per message; cached
under .cache/bench/ so that reruns skip the SDK) into a topic, then times side by side on
the same topic:
  ceiling   a plain consumer (confluent-kafka, librdkafka) + the job's decoder
            (decode_message: the C scanner, touches and orders by user bucket,
            GPU calls checked, not built), one process, nothing else; beside it the pure
            Python decoder (decode_spans) on the same messages, for comparison
  job       the Flink attribution job, bounded (read to the end, then finish), and the
            same job on an empty topic (start-up and shutdown alone), so the difference
            is the time spent on the data; a pair whose start-up run is the longer is
            void, said so and measured again (bench/streaming_runs.py), never clamped
  shapes    (--shapes 1x1,4x1,1x2,4x2: partitions x parallelism) the job on a topic of
            each partition count at each parallelism, side by side, each against the first
            shape as its baseline; --cluster runs them on a standalone Flink cluster
            (`seedance cluster`: a JobManager and TaskManagers from PyFlink's scripts, the
            job submitted with `flink run`) as well as on the in-process MiniCluster;
            every shape on a topic published unkeyed (the producer spreads the messages,
            differently each time) and keyed by the message's place (--publish); each
            run's committed credits (each conversion's latest) reduced to a digest, which
            must be the same for every run, beside the conversions late events corrected
            and the largest checkpoint (the job's state); --catch-up runs each shape also
            unbounded over the topic published beforehand, stopped once its committed
            offsets reach the end, as a restarted `seedance run` catches up. It exits 1
            when the digests differ or a run could not be measured
  buckets   (--buckets 4,32,256) every shape (1x1 without --shapes) at each user bucket
            count, against the first: what a bucket costs per span; the credits must be
            the same at every count
  latency   (--latency-s N) the job running unbounded while telemetry stamped with the
            current time is published at --rate spans/s for N seconds: p50/p99 of the
            time from an order's event time to its first credits being readable with
            read_committed (bounded below by the allowed out-of-orderness, --lateness-s,
            plus the checkpoint interval: results become visible when a checkpoint
            commits their transaction)

    .venv/bin/pip install -e '.[bench]'      # once: confluent-kafka for the ceiling
    .venv/bin/python bench/streaming.py [--users 200000] [--mode thread|process]
    .venv/bin/python bench/streaming.py --shapes 1x1,4x1,1x2,4x2 --cluster
    .venv/bin/python bench/streaming.py --shapes 1x1,4x1,8x1 --catch-up --rounds 3
    .venv/bin/python bench/streaming.py --buckets 4,32,256 --publish unkeyed
    .venv/bin/python bench/streaming.py --users 0 --latency-s 60 --rate 2000
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHE = ROOT / ".cache" / "bench"

try:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
except ImportError:  # pragma: no cover - a set-up message, not a code path
    sys.exit("bench/streaming.py needs confluent-kafka for its plain consumer (the "
             "ceiling): .venv/bin/pip install -e '.[bench]'")

from bench.live_latency import live_latency  # noqa: E402
from bench.streaming_runs import (  # noqa: E402
    Run,
    job_seconds,
    measure,
    report,
    time_on_data,
    warm_up,
)
from pipelines.codec.events import SCANNER_BUILT, decode_message  # noqa: E402
from pipelines.codec.otlp import decode_spans  # noqa: E402
from pipelines.flink.runtime.standalone import StandaloneFlink  # noqa: E402
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics  # noqa: E402
from pipelines.settings.job_config import load_config  # noqa: E402
from pipelines.sources.generator import emit, plan_events  # noqa: E402
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter  # noqa: E402
from pipelines.stack.local_kafka import LocalKafka  # noqa: E402
from udfs.periods import DAY_MS  # noqa: E402


def cached_messages(users: int, seed: int) -> list[tuple[bytes, int | None]]:
    """The population's Kafka messages with their record timestamps (when each arrives), as
    `seedance demo` generates them (OpenTelemetry SDK -> KafkaSpanExporter, malformed
    messages between batches), made once per (users, seed) and kept under .cache/bench/."""
    path = CACHE / f"spans-stamped-{users}-{seed}.bin"
    if not path.exists():
        started = time.monotonic()
        sink = CollectingProducer()
        plan = plan_events(users, seed=seed)
        emit(plan, KafkaSpanExporter("unused:0", producer=sink), sink.append, seed=seed)
        CACHE.mkdir(parents=True, exist_ok=True)
        with path.with_suffix(".tmp").open("wb") as out:
            for value, stamp in zip(sink.values, sink.timestamps, strict=True):
                out.write(struct.pack(">Iq", len(value), -1 if stamp is None else stamp)
                          + value)
        path.with_suffix(".tmp").rename(path)
        print(f"generated {len(sink.values):,} messages for {users:,} users with the "
              f"OpenTelemetry SDK in {time.monotonic() - started:.0f} s (cached in {path})")
    data = path.read_bytes()
    values: list[tuple[bytes, int | None]] = []
    at = 0
    while at < len(data):
        size, stamp = struct.unpack_from(">Iq", data, at)
        values.append((data[at + 12:at + 12 + size], None if stamp < 0 else stamp))
        at += 12 + size
    return values


def publish(bootstrap: str, topic: str, values: list[tuple[bytes, int | None]],
            keyed: bool = False) -> None:
    """Unkeyed (the producer's sticky partitioner spreads the messages differently each
    time) or keyed by the message's place (the same spread every time); each record with
    its arrival time (the topic is made CreateTime: SAMPLE_SPANS_TOPIC)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.max.bytes": 2_000_000})
    for at, (value, stamp) in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, key=str(at).encode() if keyed else None,
                                 timestamp=stamp or 0)
                break
            except BufferError:  # local queue full: let it drain
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("could not publish the benchmark messages")


def committed_count(bootstrap: str, topic: str) -> int:
    """Messages of a topic that read_committed readers see."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    count, idle = 0, 0
    while idle < 3:
        batch = consumer.consume(10_000, timeout=1.0)
        count += sum(1 for m in batch if not m.error())
        idle = 0 if batch else idle + 1
    consumer.close()
    return count


def decode_only(bootstrap: str, topic: str, buckets: int) -> tuple[float, float, float, int]:
    """(consume + decode seconds, the job's decoder alone, the Python decoder alone,
    spans)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ceiling",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 64 * 1024 * 1024,
                         "max.partition.fetch.bytes": 8 * 1024 * 1024})
    numbers = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    partitions = [TopicPartition(topic, n, OFFSET_BEGINNING) for n in numbers]
    end = sum(consumer.get_watermark_offsets(p, timeout=30)[1] for p in partitions)
    consumer.assign(partitions)
    payloads: list[bytes] = []
    spans = read = 0
    started = time.perf_counter()
    while read < end:
        for message in consumer.consume(500, timeout=1.0):
            if message.error():
                raise RuntimeError(message.error())
            read += 1
            value = message.value() or b""
            payloads.append(value)
            spans += decode_message(value, buckets).spans
    seconds = time.perf_counter() - started
    consumer.close()
    started = time.perf_counter()
    for payload in payloads:
        decode_message(payload, buckets)
    events_s = time.perf_counter() - started
    started = time.perf_counter()
    for payload in payloads:
        decode_spans(payload, gpu_calls=False)
    return seconds, events_s, time.perf_counter() - started, spans


def run_shapes(args, base, info, home: Path, values: list[tuple[bytes, int | None]],
               bucket_counts: list[int]) -> bool:
    """Each (partitions x parallelism) shape on the MiniCluster (and the standalone cluster
    with --cluster), bounded (and caught up with --catch-up), interleaved; spans/s on the
    data against the first shape, each round's runs in the order opposite to the round
    before. Whether every run was measured and the credits agree."""
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    modes = args.publish.split(",")
    runs = ["bounded", "catch-up"] if args.catch_up else ["bounded"]
    for partitions in sorted({p for p, _ in shapes}):
        ensure_topics(info.bootstrap, [f"bench_empty_{partitions}"], partitions=partitions,
                      config=SAMPLE_SPANS_TOPIC)
        for mode in modes:
            ensure_topics(info.bootstrap, [f"bench_spans_{partitions}_{mode}"],
                          partitions=partitions, config=SAMPLE_SPANS_TOPIC)
            publish(info.bootstrap, f"bench_spans_{partitions}_{mode}", values,
                    keyed=mode == "keyed")
    ceiling_s, _, _, spans = decode_only(info.bootstrap,
                                         f"bench_spans_{shapes[0][0]}_{modes[0]}",
                                         base.flink.user_buckets)
    engines: list[tuple[str, StandaloneFlink | None]] = [("MiniCluster", None)]
    cluster = None
    if args.cluster:
        cluster = StandaloneFlink(home / "flink-cluster")
        cluster.up(task_managers=max(p for _, p in shapes), slots=1)
        engines.append(("standalone", cluster))
    done: list[Run] = []
    try:
        warm = warm_up(base, info.bootstrap, f"bench_empty_{shapes[0][0]}", "warm_up")
        print(f"  warm-up run (empty topic, not measured): {warm:.2f} s", flush=True)
        for round_ in range(args.rounds):
            for engine, where in engines:
                # every other round in the opposite order: a run late in a round (the
                # in-process Flink and its Python warm, their heaps grown) is not always
                # the same shape's
                order = list(itertools.product(shapes, bucket_counts, modes, runs))
                for (partitions, parallelism), buckets, mode, how in (
                        order[::-1] if round_ % 2 else order):
                    name = (f"r{round_}_{engine}_{partitions}x{parallelism}_{mode}"
                            f"{f'_b{buckets}' if buckets else ''}"
                            f"{'_c' if how == 'catch-up' else ''}").lower()
                    done.append(measure(Run(engine, partitions, parallelism, mode, how,
                                            round_, buckets), base, info.bootstrap, spans,
                                        where, name))
    finally:
        if cluster is not None:
            cluster.down()
    print(f"{spans:,} spans in {len(values):,} messages; models: "
          f"{', '.join(base.attribution.models)}; correction horizon "
          f"{base.journey.correction_ms / DAY_MS:g} days; {args.rounds} round(s), "
          "interleaved")
    print(f"ceiling (plain consumer + decode_message): {spans / ceiling_s:,.0f} spans/s")
    return report(done)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200_000,
                        help="population size (200,000 users: about 1.2 million spans)")
    parser.add_argument("--mode", choices=["thread", "process"], default="thread")
    parser.add_argument("--models", default="",
                        help="comma-separated attribution models (default: the config's)")
    parser.add_argument("--refit-s", type=float, default=0.0,
                        help="refit period of the data-driven models (default: the config's)")
    parser.add_argument("--buckets", default="",
                        help="user buckets (default: the config's flink.user_buckets); "
                             "several, e.g. 4,32,256: each shape at each count, side by "
                             "side against the first (the credits must not differ)")
    parser.add_argument("--parallelism", type=int, default=0,
                        help="job parallelism (default: the config's; the topic gets as "
                             "many partitions)")
    parser.add_argument("--checkpoint-s", type=float, default=1.0,
                        help="checkpoint interval: a bounded job ends at its next checkpoint")
    parser.add_argument("--shapes", default="",
                        help="partitions x parallelism to compare, e.g. 1x1,4x1,1x2,4x2 "
                             "(the first is the baseline)")
    parser.add_argument("--cluster", action="store_true",
                        help="with --shapes: also on a standalone Flink cluster")
    parser.add_argument("--publish", default="unkeyed,keyed",
                        help="with --shapes: how the messages are published, unkeyed "
                             "(spread by the producer) and/or keyed (by their place)")
    parser.add_argument("--catch-up", action="store_true",
                        help="with --shapes: each run also as a catch-up (published first, "
                             "the job unbounded, stopped once its offsets reach the end)")
    parser.add_argument("--correction-days", type=float, default=None,
                        help="journey.correction_days (default: the config's, the lookback; "
                             "0: no corrections, a cheaper state)")
    parser.add_argument("--watermark-s", type=float, default=0.0,
                        help="event_time.watermark_interval_s (default: the config's)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --shapes: rounds of every shape, interleaved (medians)")
    parser.add_argument("--latency-s", type=float, default=0.0,
                        help="also measure live latency for this many seconds")
    parser.add_argument("--rate", type=float, default=2000.0, help="live spans per second")
    parser.add_argument("--lateness-s", type=float, default=5.0,
                        help="allowed out-of-orderness of the live run")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="seedance-bench-stream-"))
    broker = LocalKafka(home / "kafka")
    info = broker.up()
    if args.users == 0:
        try:
            live_latency(info.bootstrap, home, args.latency_s or 60, args.rate,
                         args.lateness_s, args.checkpoint_s)
        finally:
            broker.down()
            shutil.rmtree(home, ignore_errors=True)
        return 0
    try:
        base = load_config().replace("input", bounded=True, starting_offsets="earliest")
        base = base.replace("flink", checkpoint_interval_s=args.checkpoint_s, resume=False,
                            checkpoint_dir=str(home / "checkpoints"),
                            python_execution_mode=args.mode)
        if args.models:
            base = base.replace("attribution", models=tuple(args.models.split(",")))
        bucket_counts = [int(n) for n in args.buckets.split(",")] if args.buckets else []
        if len(bucket_counts) == 1:
            base = base.replace("flink", user_buckets=bucket_counts[0])
        elif bucket_counts and not args.shapes:
            args.shapes = f"{max(1, args.parallelism)}x{max(1, args.parallelism)}"
        if args.parallelism:
            base = base.replace("flink", parallelism=args.parallelism)
        if args.refit_s:
            base = base.replace("attribution", refit_every_s=args.refit_s)
        if args.correction_days is not None:
            base = base.replace("journey", correction_days=args.correction_days)
        if args.watermark_s:
            base = base.replace("event_time", watermark_interval_s=args.watermark_s)
        values = cached_messages(args.users, seed=11)
        if args.shapes:
            return 0 if run_shapes(args, base, info, home, values,
                                   bucket_counts if len(bucket_counts) > 1 else [0]) else 1
        ensure_topics(info.bootstrap, ["bench_spans", "bench_empty"],
                      partitions=max(1, args.parallelism), config=SAMPLE_SPANS_TOPIC)
        publish(info.bootstrap, "bench_spans", values)
        ceiling_s, decode_s, python_s, spans = decode_only(info.bootstrap, "bench_spans",
                                                           base.flink.user_buckets)

        def config_for(topic: str, run: str):
            return base.replace("topics", spans=topic, credits=f"{run}_credits",
                                dead_letter=f"{run}_dlq", late=f"{run}_late",
                                conversions=f"{run}_conversions",
                                accounting=f"{run}_accounting") \
                .replace("input", bounded=True, starting_offsets="earliest",
                         group_id=f"bench-{run}")

        times: dict[str, float] = {}  # of the last pair: "empty", "full"
        names: dict[str, str] = {}

        def timed(kind: str, topic: str, attempt: int) -> float:
            names[kind] = f"{kind}{attempt or ''}"  # a repeated pair: topics of its own
            times[kind] = job_seconds(config_for(topic, names[kind]), info.bootstrap,
                                      names[kind])
            return times[kind]

        data_s = time_on_data("Flink job", lambda n: timed("empty", "bench_empty", n),
                              lambda n: timed("full", "bench_spans", n))
        empty_s, full_s = times["empty"], times["full"]
        credits = committed_count(info.bootstrap, f"{names['full']}_credits")
        if args.latency_s:
            live_latency(info.bootstrap, home, args.latency_s, args.rate, args.lateness_s,
                         args.checkpoint_s)
    finally:
        broker.down()
        # the broker's log and the checkpoints: several hundred MB a run
        shutil.rmtree(home, ignore_errors=True)
    print(f"{spans:,} spans in {len(values):,} messages; {credits:,} credit messages; "
          f"python execution mode: {args.mode}; parallelism {base.flink.parallelism}; "
          f"{base.flink.user_buckets} user buckets; models: "
          f"{', '.join(base.attribution.models)}")
    if not SCANNER_BUILT:
        print("warning: the C scanner is not built; the job and the ceiling decode in Python")
    print(f"{'':44}{'seconds':>9}{'spans/s':>12}")
    print(f"{'ceiling: plain consumer + decode_message':44}{ceiling_s:9.2f}"
          f"{spans / ceiling_s:12,.0f}")
    print(f"{'  of which decode_message alone':44}{decode_s:9.2f}{spans / decode_s:12,.0f}")
    print(f"{'  (pure Python decode_spans alone)':44}{python_s:9.2f}{spans / python_s:12,.0f}")
    print(f"{'Flink job, whole run (start-up included)':44}{full_s:9.2f}{spans / full_s:12,.0f}")
    print(f"{'Flink job on an empty topic (start-up only)':44}{empty_s:9.2f}")
    if data_s is None:
        print("Flink job, time on the data: NOT MEASURED (each start-up run took longer)")
        return 1
    print(f"{'Flink job, time on the data':44}{data_s:9.2f}{spans / data_s:12,.0f}")
    print(f"ratio job/ceiling (time on the data): {ceiling_s / data_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
