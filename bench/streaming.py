"""Attribution job throughput: spans per second through Kafka + Flink, beside a plain Kafka
consumer that only decodes the same messages (the ceiling).

Starts its own Kafka broker in a temporary folder, generates the sample population with
the OpenTelemetry SDK into a topic, then times side by side on the same topic:
  ceiling   kafka-python consumer + decode_spans, one process, nothing else
  job       the Flink attribution job, bounded (read to the end, then finish), and the
            same job on an empty topic (start-up and shutdown alone), so the difference
            is the time spent on the data

    .venv/bin/python bench/streaming.py [--users 30000] [--mode thread|process]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from jobs.demo import generate  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.flink_job import run_job  # noqa: E402
from pipelines.kafka_io import count_messages, ensure_topics  # noqa: E402
from pipelines.local_stack import LocalKafka  # noqa: E402
from pipelines.otlp_codec import decode_spans  # noqa: E402


def decode_only(bootstrap: str, topic: str) -> tuple[float, float, int]:
    """(consume + decode seconds, decode-only seconds, spans)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=8 * 1024 * 1024)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    payloads: list[bytes] = []
    spans = 0
    started = time.perf_counter()
    while consumer.position(tp) < end:
        for records in consumer.poll(timeout_ms=500, max_records=500).values():
            for record in records:
                payloads.append(record.value)
                spans += decode_spans(record.value).spans
    seconds = time.perf_counter() - started
    consumer.close()
    started = time.perf_counter()
    for payload in payloads:
        decode_spans(payload)
    return seconds, time.perf_counter() - started, spans


def job_seconds(config, bootstrap: str, name: str) -> float:
    started = time.perf_counter()
    run_job(config, bootstrap, job_name=name)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=30_000)
    parser.add_argument("--mode", choices=["thread", "process"], default="thread")
    parser.add_argument("--models", default="",
                        help="comma-separated attribution models (default: the config's)")
    parser.add_argument("--refit-s", type=float, default=0.0,
                        help="refit period of the data-driven models (default: the config's)")
    parser.add_argument("--checkpoint-s", type=float, default=1.0,
                        help="checkpoint interval: a bounded job ends at its next checkpoint")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="seedance-bench-stream-"))
    broker = LocalKafka(home / "kafka")
    info = broker.up()
    try:
        base = load_config().replace("input", bounded=True, starting_offsets="earliest")
        base = base.replace("flink", checkpoint_interval_s=args.checkpoint_s, resume=False,
                            checkpoint_dir=str(home / "checkpoints"),
                            python_execution_mode=args.mode)
        if args.models:
            base = base.replace("attribution", models=tuple(args.models.split(",")))
        if args.refit_s:
            base = base.replace("attribution", refit_every_s=args.refit_s)
        print(generate(info.bootstrap, "bench_spans", users=args.users, seed=11))
        ensure_topics(info.bootstrap, ["bench_empty"])
        ceiling_s, decode_s, spans = decode_only(info.bootstrap, "bench_spans")

        def config_for(topic: str, run: str):
            return base.replace("topics", spans=topic, credits=f"{run}_credits",
                                dead_letter=f"{run}_dlq", late=f"{run}_late") \
                .replace("input", bounded=True, starting_offsets="earliest",
                         group_id=f"bench-{run}")

        empty_s = job_seconds(config_for("bench_empty", "empty"), info.bootstrap, "empty")
        full_s = job_seconds(config_for("bench_spans", "full"), info.bootstrap, "full")
        credits = count_messages(info.bootstrap, "full_credits")
    finally:
        broker.down()
    data_s = max(full_s - empty_s, 1e-9)
    print(f"{spans:,} spans in the topic; "
          f"{credits:,} credit rows; python execution mode: {args.mode}")
    print(f"{'':44}{'seconds':>9}{'spans/s':>12}")
    print(f"{'ceiling: kafka-python + decode_spans':44}{ceiling_s:9.2f}{spans / ceiling_s:12,.0f}")
    print(f"{'  of which decode_spans alone':44}{decode_s:9.2f}{spans / decode_s:12,.0f}")
    print(f"{'Flink job, whole run (start-up included)':44}{full_s:9.2f}{spans / full_s:12,.0f}")
    print(f"{'Flink job on an empty topic (start-up only)':44}{empty_s:9.2f}")
    print(f"{'Flink job, time on the data':44}{data_s:9.2f}{spans / data_s:12,.0f}")
    print(f"ratio job/ceiling (time on the data): {ceiling_s / data_s:.2f}")


if __name__ == "__main__":
    main()
