"""What is published to Kafka: `seedance generate` (sample telemetry through the
OpenTelemetry SDK), `seedance probe` (GPU samples) and `seedance spend publish` (ad spend)."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from jobs.commands.common import (
    BOOTSTRAP_HELP,
    CONFIG_HELP,
    CliError,
    busy_fraction,
    job_config,
    positive_int,
)
from pipelines.kafka.address import resolve_bootstrap
from pipelines.settings.job_config import GpuConfig, StreamingJobConfig, TopicsConfig
from pipelines.sources.repeat_buying import REPEAT_BUYING_PRESETS


def add_probe(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    probe = sub.add_parser("probe", help="sample GPUs (NVML, dcgm-exporter or a recording) "
                                          "and publish to Kafka")
    source = probe.add_mutually_exclusive_group()
    source.add_argument("--from-prometheus", metavar="URL",
                        help="a dcgm-exporter /metrics endpoint")
    source.add_argument("--replay", metavar="FILE", help="recorded samples (JSON lines)")
    probe.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    probe.add_argument("--count", type=int, default=None, help="stop after N scrapes")
    probe.add_argument("--realtime", action="store_true",
                       help="replay at the recorded pace instead of at once")
    probe.add_argument("--topic", help="default: gpu.metrics_topic of the config "
                                        f"({GpuConfig.metrics_topic})")
    probe.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    probe.add_argument("--config", help=f"{CONFIG_HELP} (its Kafka address and security)")
    probe.add_argument("--no-publish", action="store_true", help="print only")
    probe.add_argument("--prices", help="GPU price catalog YAML (default: the examples)")
    probe.add_argument("--warn-mem-bandwidth", type=float, default=90.0, metavar="PCT")
    probe.add_argument("--warn-idle-util", type=float, default=5.0, metavar="PCT")
    probe.add_argument("--warn-egress-mb-s", type=float, default=500.0, metavar="MB_S")
    probe.set_defaults(func=cmd_probe)


def add_generate(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gen = sub.add_parser("generate", help="emit sample telemetry through the OpenTelemetry SDK")
    gen.add_argument("--users", type=positive_int, default=1000)
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--days", type=positive_int, default=45)
    gen.add_argument("--topic", help="default: topics.spans of the config "
                                      f"({TopicsConfig.spans})")
    gen.add_argument("--encoding", choices=["otlp_proto", "otlp_json"], default="otlp_proto")
    gen.add_argument("--touches", choices=["attributes", "http"], default="attributes",
                     help="touches as explicit marketing.* attributes, or as plain HTTP "
                          "landing requests whose UTM parameters or referrer name the "
                          "channel (what auto-instrumentation sends: schemas/TELEMETRY.md)")
    gen.add_argument("--orders", choices=["spans", "table", "both"], default="spans",
                     help="where the orders are: order.* attributes on spans, the orders "
                          "table's change stream (Debezium events of shop.orders, "
                          "jobs/config/order_changes.yaml; docs/order-changes.md), or both "
                          "(each order on both paths: the job counts it once)")
    gen.add_argument("--orders-topic", default="shop.shop.orders",
                     help="the change stream's topic with --orders table|both (default: "
                          "%(default)s, Debezium's name for it)")
    gen.add_argument("--refunds", type=busy_fraction, default=0.05, metavar="FRACTION",
                     help="with --orders table|both, this share of the orders is refunded "
                          "1-14 days later, whole or half (default %(default)s)")
    gen.add_argument("--holdouts", action="store_true",
                     help="one holdout per paid channel, as in the demo: 10 %% of each "
                          "channel's audience kept from it (flag holdout.<channel>), a known "
                          "share of its buyers caused by it (`seedance incrementality`)")
    gen.add_argument("--partition-by-trace", action="store_true",
                     help="one message per trace, keyed by the trace id (hex)")
    gen.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    gen.add_argument("--config", help=f"{CONFIG_HELP} (its Kafka address and security)")
    gen.add_argument("--experiments", action="store_true",
                     help="expose every user to the demo's two experiments (feature-flag "
                          "spans; one variant earns more, the other experiment changes "
                          "nothing)")
    gen.add_argument("--gpu-busy", type=busy_fraction, default=0.0, metavar="FRACTION",
                     help="add an hourly batch job that keeps each sample GPU this busy on "
                          "average, e.g. 0.5 as in `make demo` (default 0: ranking calls "
                          "only)")
    gen.add_argument("--repeat-buying", choices=sorted(REPEAT_BUYING_PRESETS),
                     help="follow each first order by repeat orders from a known buying "
                          "process per acquisition channel (BG/NBD purchases, Gamma-Gamma "
                          "values; `demo`: the demo's, see pipelines/sources/repeat_buying.py)")
    gen.add_argument("--gpu-recording", metavar="FILE",
                     help="also write GPU samples for the generated GPU calls (JSON lines, "
                          "for `seedance probe --replay`)")
    gen.set_defaults(func=cmd_generate)


def add_spend(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    spend = sub.add_parser("spend", help="publish ad spend (CSV: platform,account,campaign,"
                                          "day,amount,currency) to the ad spend topic")
    spend.add_argument("action", choices=["publish"])
    spend.add_argument("file", help="CSV file; a restated day is simply published again")
    spend.add_argument("--topic", help="default: topics.ad_spend of the config")
    spend.add_argument("--config", help=CONFIG_HELP)
    spend.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    spend.set_defaults(func=cmd_spend)


def kafka_of(args: argparse.Namespace, config: StreamingJobConfig | None = None
             ) -> tuple[str, dict[str, Any]]:
    """The Kafka address (`--bootstrap`, else the config's) and kafka-python settings
    (the config's `kafka.properties`: SASL, TLS) of a publishing command."""
    from pipelines.kafka.security import for_python

    config = config or job_config(args)
    return (resolve_bootstrap(args.bootstrap, config),
            for_python(dict(config.kafka.properties)))


def cmd_generate(args: argparse.Namespace) -> int:
    from pipelines.sources.generator import plan_events
    from pipelines.sources.publish import (
        DEMO_EXPERIMENTS,
        generated_summary,
        publish_plan,
        write_gpu_recording,
    )

    config = job_config(args)
    topic = args.topic or config.topics.spans
    bootstrap, client = kafka_of(args, config)
    started = time.monotonic()
    # one plan: its spans and, with --gpu-recording, the GPU samples of its GPU calls
    plan = plan_events(args.users, seed=args.seed, days=args.days,
                       experiments=DEMO_EXPERIMENTS if args.experiments else (),
                       batch_busy=args.gpu_busy,
                       repeat_buying=REPEAT_BUYING_PRESETS[args.repeat_buying]
                       if args.repeat_buying else None)
    if args.holdouts:
        from pipelines.sources.holdouts import DEMO_HOLDOUTS, with_holdouts

        plan = with_holdouts(plan, DEMO_HOLDOUTS, args.seed)
    orders = [event for event in plan.events if event.kind == "conversion"]
    on_spans = plan if args.orders != "table" else replace(
        plan, events=[event for event in plan.events if event.kind != "conversion"])
    spans = publish_plan(on_spans, bootstrap, topic, seed=args.seed, encoding=args.encoding,
                         partition_by_trace=args.partition_by_trace, client=client,
                         touches=args.touches)
    print(generated_summary(on_spans, spans, args.users, topic, time.monotonic() - started))
    if args.orders != "spans":
        from pipelines.sources.order_table import publish_table_changes, table_changes

        changes = table_changes(orders, args.refunds, args.seed)
        published = publish_table_changes(changes, bootstrap, args.orders_topic, client)
        print(f"and {published} change events of the orders table to {args.orders_topic}: "
              f"{len(orders)} orders, {len(changes.refunds)} refunds of "
              f"{sum(refund.refunded for refund in changes.refunds):,.2f} (read them with "
              f"order_changes.topic: {args.orders_topic} and order_changes.mapping: "
              "order_changes.yaml in the job's config)")
    if args.gpu_recording:
        count = write_gpu_recording(plan, Path(args.gpu_recording), args.seed)
        print(f"wrote {count} GPU samples for the generated GPU calls to {args.gpu_recording} "
              f"(publish them with `seedance probe --replay {args.gpu_recording}`)")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from pipelines.codec.metrics import encode_samples
    from pipelines.kafka.io import producer
    from pipelines.sources.gpu_probe import Thresholds, run_probe
    from pipelines.sources.gpu_sources import (
        GpuSourceError,
        nvml_source,
        prometheus_source,
        replay_source,
    )
    from schemas.gpu import load_catalog

    catalog = load_catalog(Path(args.prices) if args.prices else None)
    limits = Thresholds(args.warn_mem_bandwidth, args.warn_idle_util,
                        egress_mb_s=args.warn_egress_mb_s)
    if args.replay:
        scrapes = replay_source(Path(args.replay), args.interval if args.realtime else 0.0)
    elif args.from_prometheus:
        scrapes = prometheus_source(args.from_prometheus, args.interval, args.count)
    else:
        scrapes = nvml_source(args.interval, args.count)
    publish = None
    sink = None
    config = job_config(args)
    topic = args.topic or config.gpu.metrics_topic
    if not args.no_publish:
        bootstrap, client = kafka_of(args, config)
        sink = producer(bootstrap, **client)

        def publish(batch: list) -> None:
            sink.send(topic, encode_samples(batch)).get(30)

    try:
        samples, warnings = run_probe(scrapes, catalog, publish, limits)
    except GpuSourceError as error:
        raise CliError(str(error)) from None
    finally:
        if sink is not None:
            sink.close()
    target = "not published" if args.no_publish else f"published to {topic}"
    print(f"{samples} samples {target}; {warnings} warnings")
    return 0


def cmd_spend(args: argparse.Namespace) -> int:
    from pipelines.kafka.io import ensure_topics
    from pipelines.sources.ad_spend import SpendError, read_csv
    from pipelines.sources.publish import publish_spend

    try:
        records = read_csv(Path(args.file))
    except SpendError as error:
        raise CliError(str(error)) from None
    config = job_config(args)
    topic = args.topic or config.topics.ad_spend
    bootstrap, client = kafka_of(args, config)
    ensure_topics(bootstrap, [topic], client=client)
    publish_spend(bootstrap, topic, records, client)
    days = sorted({r.day for r in records})
    span = f"{days[0]} .. {days[-1]}" if days else "no days"
    print(f"published {len(records)} spend records ({span}) to {topic}")
    return 0
