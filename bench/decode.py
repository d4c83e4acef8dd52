"""OTLP decoding throughput: `decode_spans` against the bare protobuf parse (the ceiling).

Builds messages of 500 spans each from the sample generator (same shape as the demo), then
times, side by side on the same bytes:
  baseline  ExportTraceServiceRequest.FromString + reading every span's attribute keys
  ours      pipelines.codec.otlp.decode_spans (parse, classify, validate, build records)
  scanner   pipelines.codec.events.decode_message, what the attribution job calls: the C
            scanner (pipelines/codec/otlp_scan.c) packs touches and orders by user bucket, GPU
            calls checked, not built (decode_spans' same rules; tests hold them equal)

    .venv/bin/python bench/decode.py [--users 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

from pipelines.codec.events import SCANNER_BUILT, decode_message  # noqa: E402
from pipelines.codec.otlp import decode_spans  # noqa: E402
from pipelines.sources.generator import emit, plan_events  # noqa: E402
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter  # noqa: E402


def messages(users: int, encoding: str) -> list[bytes]:
    sink = CollectingProducer()
    plan = plan_events(users, seed=1, malformed_messages=0)
    emit(plan, KafkaSpanExporter("unused:0", producer=sink, encoding=encoding),
         lambda _: None, batch_size=500)
    return sink.values


def baseline(batch: list[bytes]) -> int:
    spans = 0
    for payload in batch:
        for rs in ExportTraceServiceRequest.FromString(payload).resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    # the least a classifier must do: look at every attribute key
                    spans += bool({kv.key for kv in span.attributes})
    return spans


def ours(batch: list[bytes]) -> int:
    return sum(decode_spans(payload).spans for payload in batch)


def scanner(batch: list[bytes]) -> int:
    return sum(decode_message(payload, 4).spans for payload in batch)


def best_of(repeat: int, fn, batch: list[bytes]) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        spans = fn(batch)
        times.append(time.perf_counter() - started)
    return min(times), spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    batch = messages(args.users, "otlp_proto")
    size = sum(map(len, batch))
    print(f"{len(batch)} messages, {size / len(batch) / 1000:.0f} KB each on average")
    base_s, spans = best_of(args.repeat, baseline, batch)
    ours_s, spans_ours = best_of(args.repeat, ours, batch)
    assert spans == spans_ours, (spans, spans_ours)
    print(f"{'':28}{'spans/s':>12}{'MB/s':>8}")
    print(f"{'baseline: parse + keys':28}{spans / base_s:12,.0f}{size / base_s / 1e6:8.1f}")
    print(f"{'ours: decode_spans':28}{spans / ours_s:12,.0f}{size / ours_s / 1e6:8.1f}")
    print(f"ratio ours/baseline: {base_s / ours_s:.2f}")
    if not SCANNER_BUILT:
        print("the C scanner is not built (no C compiler at install): no scanner figure")
        return
    scan_s, spans_scan = best_of(args.repeat, scanner, batch)
    assert spans == spans_scan, (spans, spans_scan)
    print(f"{'scanner: decode_message':28}{spans / scan_s:12,.0f}{size / scan_s / 1e6:8.1f}")
    print(f"ratio scanner/baseline: {base_s / scan_s:.2f}")


if __name__ == "__main__":
    main()
