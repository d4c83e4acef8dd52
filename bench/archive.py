"""The raw archiver's throughput beside the bare decode of the same messages.

Starts a private Kafka broker, publishes a generated population through the OpenTelemetry
SDK and the project's exporter (500 spans per message, as the demo does), then times
`seedance archive` over the topic (consume read_committed, decode, write Parquet by day,
store offsets) against decoding the same messages in a plain loop.

    .venv/bin/python bench/archive.py [--users 20000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.backfill.archive import archive_topic  # noqa: E402
from pipelines.codec.otlp import decode_spans  # noqa: E402
from pipelines.kafka.io import ensure_topics, producer, read_all  # noqa: E402
from pipelines.sources.generator import emit, plan_events  # noqa: E402
from pipelines.sources.kafka_exporter import KafkaSpanExporter  # noqa: E402
from pipelines.stack.local_kafka import LocalKafka  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20_000)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="seedance-archive-bench-"))
    broker = LocalKafka(home / "kafka")
    bootstrap = broker.up().bootstrap
    try:
        ensure_topics(bootstrap, ["spans"])
        raw = producer(bootstrap)
        spans = emit(plan_events(args.users, seed=7),
                     KafkaSpanExporter(bootstrap, "spans"),
                     lambda payload: raw.send("spans", payload).get(30), batch_size=500)
        raw.close()
        values = [value for _, value in read_all(bootstrap, "spans")]
        started = time.perf_counter()
        records = sum(len(decode_spans(value).records) for value in values)
        decode_s = time.perf_counter() - started
        started = time.perf_counter()
        total = archive_topic(bootstrap, "spans", home / "archive")  # the shipped batch size
        archive_s = time.perf_counter() - started
        written = sum(total.records.values())
        assert written == records, (written, records)
        print(f"{len(values):,} messages, {spans:,} spans, {records:,} records")
        print(f"{'bare decode':22}{spans / decode_s:12,.0f} spans/s")
        print(f"{'seedance archive':22}{spans / archive_s:12,.0f} spans/s  ({total.files} files, "
              f"ratio {decode_s / archive_s:.2f})")
    finally:
        broker.down()


if __name__ == "__main__":
    main()
