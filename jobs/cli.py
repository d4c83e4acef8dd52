"""The `seedance` command line."""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobs.attribute import InputError
from pipelines.settings.job_config import ENV_VARS, ConfigError, StreamingJobConfig, load_config
from pipelines.settings.paths import state_home
from pipelines.stack.local_kafka import LocalKafka, StackError
from udfs.settings import ComputeSettings


class CliError(RuntimeError):
    """A user-facing failure: printed without a traceback, exit code 2."""


def local_kafka() -> LocalKafka:
    return LocalKafka(state_home() / "kafka")


def resolve_bootstrap(explicit: str | None, config: StreamingJobConfig | None = None) -> str:
    if explicit:
        return explicit
    if config and config.kafka.bootstrap:
        return config.kafka.bootstrap
    info = local_kafka().info()
    if info is None:
        raise CliError("no Kafka broker: start the local one with `seedance stack up`, "
                       "or pass --bootstrap HOST:PORT (or set SEEDANCE_KAFKA_BOOTSTRAP)")
    return info.bootstrap


# --- stack ---------------------------------------------------------------------------

def cmd_stack(args: argparse.Namespace) -> int:
    kafka = local_kafka()
    if args.action == "up":
        already = kafka.info()
        started = time.monotonic()
        info = kafka.up()
        verb = "already running" if already else f"started in {time.monotonic() - started:.1f}s"
        print(f"Kafka broker {verb}: bootstrap {info.bootstrap} (pid {info.pid})")
        print(f"  data {info.data_dir}\n  log  {info.log_file}")
    elif args.action == "down":
        print("Kafka broker stopped" if kafka.down() else "Kafka broker was not running")
    else:
        info = kafka.info()
        if info is None:
            print("Kafka broker: not running (start it with `seedance stack up`)")
            return 3
        print(f"Kafka broker: running, bootstrap {info.bootstrap}, pid {info.pid}, "
              f"up {time.time() - info.started_at:.0f}s\n  data {info.data_dir}")
    return 0


# --- generate ------------------------------------------------------------------------

def cmd_generate(args: argparse.Namespace) -> int:
    from jobs.demo import generate

    bootstrap = resolve_bootstrap(args.bootstrap)
    summary = generate(bootstrap, args.topic, users=args.users, seed=args.seed, days=args.days,
                       encoding=args.encoding, partition_by_trace=args.partition_by_trace)
    print(summary)
    if args.gpu_recording:
        from jobs.demo import write_gpu_recording

        count = write_gpu_recording(Path(args.gpu_recording), args.users, args.seed, args.days)
        print(f"wrote {count} GPU samples for the generated GPU calls to {args.gpu_recording} "
              f"(publish them with `seedance probe --replay {args.gpu_recording}`)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from jobs.demo import print_gpu_summary, print_summary
    from pipelines.store.warehouse import Warehouse, redacted_url

    config = job_config(args)
    warehouse = Warehouse(config.warehouse.url)
    try:
        has_credits = bool(warehouse.totals())
        has_gpu_costs = bool(warehouse.gpu_cost_summary()["interval_usd"])
        if has_credits:
            print_summary(warehouse)
        if has_gpu_costs:
            print_gpu_summary(warehouse)
        if not has_credits and not has_gpu_costs:
            print(f"{redacted_url(warehouse.url)} holds no results yet: run a job, then "
                  "`seedance load`")
    finally:
        warehouse.close()
    return 0


# --- run -----------------------------------------------------------------------------

def job_config(args: argparse.Namespace) -> StreamingJobConfig:
    config = load_config(Path(args.config) if args.config else None)
    if getattr(args, "bounded", False):
        config = config.replace("input", bounded=True)
    return config


def cmd_run(args: argparse.Namespace) -> int:
    config = job_config(args)
    bootstrap = resolve_bootstrap(args.bootstrap, config)
    until = "stops at the end of the input" if config.input.bounded else "Ctrl-C to stop"
    from pipelines.kafka.io import ensure_topics
    from pipelines.kafka.security import for_python

    topics, gpu = config.topics, config.gpu
    client = for_python(dict(config.kafka.properties))  # the job's own clients are Java
    ensure_topics(bootstrap, [topics.spans, topics.credits, topics.dead_letter, topics.late,
                              topics.conversions, topics.accounting]
                  + ([gpu.metrics_topic, gpu.costs_topic, gpu.metrics_dead_letter]
                     if args.job == "gpu-cost" else [])
                  + ([topics.ad_spend, gpu.costs_topic, topics.roi, topics.roi_dead_letter]
                     if args.job == "roi" else []), client=client)
    if args.job == "roi":
        from pipelines.flink.roi_job import run_roi_job

        print(f"Running the ROI job on {bootstrap}: {topics.credits} + {topics.conversions} + "
              f"{topics.ad_spend} + {gpu.costs_topic} -> {topics.roi} (dead letters: "
              f"{topics.roi_dead_letter}); {until}")
        with resume_hint(config, "seedance-roi", args.verbose):
            run_roi_job(config, bootstrap)
        return 0
    if args.job == "gpu-cost":
        from pipelines.flink.gpu_cost_job import run_gpu_job

        gpu = config.gpu
        print(f"Running the GPU cost job on {bootstrap}: {gpu.metrics_topic} + "
              f"{config.topics.spans} -> {gpu.costs_topic} (dead letters: "
              f"{gpu.metrics_dead_letter}); {until}")
        with resume_hint(config, "seedance-gpu-cost", args.verbose):
            run_gpu_job(config, bootstrap)
        return 0
    from pipelines.flink.attribution_job import run_job

    print(f"Running the attribution job on {bootstrap}: {config.topics.spans} -> "
          f"{config.topics.credits} (dead letters: {config.topics.dead_letter}, "
          f"late: {config.topics.late}); {until}")
    with resume_hint(config, "seedance-attribution", args.verbose):
        run_job(config, bootstrap)
    from pipelines.store.accounting import adds_up, format_report, latest_report

    report = latest_report(bootstrap, topics.accounting, client)
    if report:
        print(format_report(report, topics.dead_letter, topics.late))
        if not adds_up(report):
            return 1
    return 0


@contextmanager
def resume_hint(config: StreamingJobConfig, job_name: str,
                verbose: bool = False) -> Iterator[None]:
    """A job that fails, or whose Flink JVM dies: one line with the root cause and where its
    state is (the Java trace with -v). A restart resumes journeys and offsets together from
    the newest checkpoint; only a checkpoint that cannot be restored gets the way out, with
    what it costs."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    from pipelines.flink.kafka import checkpoint_root, latest_checkpoint

    where = checkpoint_root(config, job_name)
    resumed = latest_checkpoint(where) if config.flink.resume else None
    try:
        yield
    except Py4JJavaError as error:
        if verbose:
            traceback.print_exc()
        cause = root_cause(error)
        if resumed is not None and _RESTORE_WORDS.search(cause):
            raise CliError(
                f"the {job_name} job failed after resuming from {resumed}: {cause}. That "
                "checkpoint cannot be restored here (written by another version or "
                "config?): restore it with the code and config that wrote it, or start "
                "without it (`flink.resume: false`, or another checkpoint_dir) knowing that "
                "its journeys in progress and order history are then not carried over "
                "(-v prints the Java trace)") from None
        raise CliError(f"the {job_name} job failed: {cause}. Its checkpoints are kept in "
                       f"{where}; `seedance run` again resumes from the newest (-v prints "
                       "the Java trace)") from None
    except (Py4JNetworkError, Py4JError, ConnectionError) as error:
        if verbose:
            traceback.print_exc()
        raise CliError(f"the Flink JVM running {job_name} exited ({type(error).__name__}); its "
                       f"checkpoints are kept in {where}; `seedance run` again resumes from "
                       "the newest") from None


# failures that follow another (a task already gone when an event reached it): never the
# reason to show
_CONSEQUENCES = ("TaskNotRunningException",)
# what a failure to restore a checkpoint says (Flink's metadata loader, state serializers,
# the journeys' own bucket-count check)
_RESTORE_WORDS = re.compile(r"magic number|rollback to checkpoint|cannot map (checkpoint|"
                            r"savepoint)|could not restore|restore (operation|state)|"
                            r"StateMigrationException|incompatible|user_buckets", re.I)


def root_cause(error: Exception) -> str:
    """The innermost Java exception's first line that is not merely a consequence (for a
    Python operator's failure, the Python exception), at most 600 characters."""
    try:
        chain, cause = [], error.java_exception  # type: ignore[attr-defined]
        while cause is not None and len(chain) < 50:
            chain.append(str(cause.toString()))
            cause = cause.getCause() if cause.getCause() != cause else None
        telling = [c for c in chain if not any(name in c.split(":")[0]
                                                for name in _CONSEQUENCES)]
        text = (telling or chain)[-1]
    except Exception:  # noqa: BLE001 - the JVM may be gone: say what we can
        text = str(error)
    line = " ".join(text.split())
    return line if len(line) <= 600 else line[:600] + "..."


def cmd_load(args: argparse.Namespace) -> int:
    from pipelines.kafka.security import for_python
    from pipelines.store.warehouse import Warehouse, redacted_url

    config = job_config(args)
    bootstrap = resolve_bootstrap(args.bootstrap, config)
    warehouse = Warehouse(config.warehouse.url, for_python(dict(config.kafka.properties)))
    try:
        if args.follow:
            print(f"loading {config.topics.credits} into {redacted_url(warehouse.url)} as it "
                  "arrives (Ctrl-C to stop)")
            warehouse.load_credits(bootstrap, config.topics.credits, follow=True)
        rows = warehouse.load_credits(bootstrap, config.topics.credits)
        gpu_rows = warehouse.load_gpu_costs(bootstrap, config.gpu.costs_topic)
        roi_rows = warehouse.load_roi(bootstrap, config.topics.roi)
        spend_rows = warehouse.load_spend(bootstrap, config.topics.ad_spend, config.roi.currency)
    finally:
        warehouse.close()
    print(f"loaded {rows} credit messages (tables of credit rows), {gpu_rows} GPU cost rows, "
          f"{roi_rows} ROI rows and {spend_rows} spend records into "
          f"{redacted_url(warehouse.url)}")
    return 0


def cmd_spend(args: argparse.Namespace) -> int:
    from pipelines.kafka.io import ensure_topics, producer
    from pipelines.sources.ad_spend import SpendError, read_csv

    try:
        records = read_csv(Path(args.file))
    except SpendError as error:
        raise CliError(str(error)) from None
    config = job_config(args)
    topic = args.topic or config.topics.ad_spend
    bootstrap = resolve_bootstrap(args.bootstrap, config)
    ensure_topics(bootstrap, [topic])
    out = producer(bootstrap)
    try:
        for record in records:
            out.send(topic, record.to_json().encode())
        out.flush()
    finally:
        out.close()
    days = sorted({r.day for r in records})
    span = f"{days[0]} .. {days[-1]}" if days else "no days"
    print(f"published {len(records)} spend records ({span}) to {topic}")
    return 0


def attribute_settings(args: argparse.Namespace) -> ComputeSettings:
    """The job config's settings (`--config`, else the shipped defaults), with what the
    flags change; a flag left out keeps the config's value."""
    import dataclasses

    settings = load_config(Path(args.config) if args.config else None).computation
    journey = settings.journey
    if args.lookback_days is not None or args.max_touches is not None:
        journey = dataclasses.replace(
            journey, **({"lookback_days": args.lookback_days}
                        if args.lookback_days is not None else {}),
            **({"max_touches": args.max_touches} if args.max_touches is not None else {}))
    params = dataclasses.replace(settings.params, **{
        name: value for name, value in (
            ("half_life_days", args.half_life_days), ("markov_order", args.markov_order),
            ("shapley_permutations", args.shapley_permutations), ("seed", args.seed))
        if value is not None})
    models = tuple(m.strip() for m in args.models.split(",") if m.strip()) if args.models \
        else settings.models
    try:
        return dataclasses.replace(settings, journey=journey, params=params, models=models)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def cmd_attribute(args: argparse.Namespace) -> int:
    from jobs.attribute import AttributeRequest, run

    out = Path(args.out)
    request = AttributeRequest(
        input=Path(args.input), out=out, settings=attribute_settings(args), format=args.format,
        by_campaign=args.by == "campaign", transform=args.transform,
        skip_invalid=args.skip_invalid,
        rejects=Path(args.rejects) if args.rejects else out.with_name(out.stem + ".rejects.csv"),
        credits_out=Path(args.credits) if args.credits else None)
    result, stats = run(request)
    print(f"{stats['journeys']:,} journeys, {stats['touches']:,} touches, "
          f"{stats['conversions']:,.0f} conversions; loaded in {stats['load_s']:.1f}s, "
          f"models in {stats['models_s']:.1f}s")
    if request.credits_out is not None:
        print(f"credit rows written to {request.credits_out}")
    if stats["rejected_rows"]:
        print(f"{stats['rejected_rows']} invalid rows set aside in {request.rejects}")
    for model, info in stats["info"].items():  # type: ignore[attr-defined]
        if info.removal_effects:
            effects = ", ".join(f"{c} {e:.3f}" for c, e in info.removal_effects.items())
            print(f"{model} removal effects: {effects}")
        if info.sampled_sets:
            print(f"{model}: {info.sampled_sets} channel sets above 16 channels sampled; "
                  f"largest standard error {info.max_standard_error:.2e}")
    print(f"{len(result)} rows written to {out}")
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
    if not args.no_publish:
        bootstrap = resolve_bootstrap(args.bootstrap)
        sink = producer(bootstrap)

        def publish(batch: list) -> None:
            sink.send(args.topic, encode_samples(batch)).get(30)

    try:
        samples, warnings = run_probe(scrapes, catalog, publish, limits)
    except GpuSourceError as error:
        raise CliError(str(error)) from None
    finally:
        if sink is not None:
            sink.close()
    target = "not published" if args.no_publish else f"published to {args.topic}"
    print(f"{samples} samples {target}; {warnings} warnings")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo import run_demo

    return run_demo(users=args.users, seed=args.seed, keep_stack=args.keep_stack)


# --- parser --------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    env_help = "\n".join(f"  {name:26} {text}" for name, text in ENV_VARS.items())
    parser = argparse.ArgumentParser(
        prog="seedance",
        description="Streaming telemetry and ROI attribution: OpenTelemetry spans through "
                    "Kafka into Flink, credited to marketing channels.",
        epilog=f"environment variables:\n{env_help}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="stack up, sample telemetry, run the job, print results")
    demo.add_argument("--users", type=int, default=2000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--keep-stack", action="store_true",
                      help="leave the Kafka broker running afterwards")
    demo.set_defaults(func=cmd_demo)

    attr = sub.add_parser("attribute", help="batch attribution of an events or paths file")
    attr.add_argument("--input", required=True, help="CSV or Parquet file")
    attr.add_argument("--format", choices=["events", "paths"], default="events",
                      help="events: user_id,timestamp,channel,campaign,event_type,revenue,"
                           "order_id; paths: path,conversions,non_conversions,revenue")
    attr.add_argument("--config", help="the streaming job's YAML: compute with its settings "
                      "(journey rules, models, refit period), as the stream and the backfill "
                      "do; default: the shipped jobs/config/streaming.yaml. The flags below "
                      "change single values of it")
    attr.add_argument("--models", help="comma-separated (default: the config's models)")
    attr.add_argument("--out", required=True, help="result file, .csv or .parquet")
    attr.add_argument("--credits", metavar="FILE",
                      help="events input: also write every credit row (.csv or .parquet), "
                           "the rows the stream writes to its credits topic")
    attr.add_argument("--by", choices=["channel", "campaign"], default="channel")
    attr.add_argument("--lookback-days", type=float, help="default: the config's")
    attr.add_argument("--max-touches", type=int, help="default: the config's")
    attr.add_argument("--transform", choices=["none", "collapse", "drop_repeats", "unique"],
                      default="none", help="paths input: path rewrite before the models run")
    attr.add_argument("--half-life-days", type=float, help="time_decay (default: the config's)")
    attr.add_argument("--markov-order", type=int, help="default: the config's")
    attr.add_argument("--shapley-permutations", type=int,
                      help="samples per channel set above 16 channels (default 2000)")
    attr.add_argument("--seed", type=int, help="of the Shapley sampling (default 0)")
    attr.add_argument("--skip-invalid", action="store_true",
                      help="set invalid rows aside in a rejects file instead of stopping")
    attr.add_argument("--rejects", help="rejects file (default: <out>.rejects.csv)")
    attr.set_defaults(func=cmd_attribute)

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
    probe.add_argument("--topic", default="otlp_metrics")
    probe.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
    probe.add_argument("--no-publish", action="store_true", help="print only")
    probe.add_argument("--prices", help="GPU price catalog YAML (default: the examples)")
    probe.add_argument("--warn-mem-bandwidth", type=float, default=90.0, metavar="PCT")
    probe.add_argument("--warn-idle-util", type=float, default=5.0, metavar="PCT")
    probe.add_argument("--warn-egress-mb-s", type=float, default=500.0, metavar="MB_S")
    probe.set_defaults(func=cmd_probe)

    stack = sub.add_parser("stack", help="the local Kafka broker (KRaft, loopback)")
    stack.add_argument("action", choices=["up", "down", "status"])
    stack.set_defaults(func=cmd_stack)

    gen = sub.add_parser("generate", help="emit sample telemetry through the OpenTelemetry SDK")
    gen.add_argument("--users", type=int, default=1000)
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--days", type=int, default=45)
    gen.add_argument("--topic", default="otlp_spans")
    gen.add_argument("--encoding", choices=["otlp_proto", "otlp_json"], default="otlp_proto")
    gen.add_argument("--partition-by-trace", action="store_true",
                     help="one message per trace, keyed by the trace id (hex)")
    gen.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
    gen.add_argument("--gpu-recording", metavar="FILE",
                     help="also write GPU samples for the generated GPU calls (JSON lines, "
                          "for `seedance probe --replay`)")
    gen.set_defaults(func=cmd_generate)

    spend = sub.add_parser("spend", help="publish ad spend (CSV: platform,account,campaign,"
                                          "day,amount,currency) to the ad spend topic")
    spend.add_argument("action", choices=["publish"])
    spend.add_argument("file", help="CSV file; a restated day is simply published again")
    spend.add_argument("--topic", help="default: topics.ad_spend of the config")
    spend.add_argument("--config", help="job config YAML (default: jobs/config/streaming.yaml)")
    spend.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
    spend.set_defaults(func=cmd_spend)

    report = sub.add_parser("report", help="print the results held in the warehouse")
    report.add_argument("--config", help="job config YAML (default: jobs/config/streaming.yaml)")
    report.set_defaults(func=cmd_report)

    from jobs.dashboard import add_parser as add_dashboard

    add_dashboard(sub)

    for name, func, text in (("run", cmd_run, "run a streaming job on Flink: attribution "
                                              "(default), gpu-cost or roi"),
                             ("load", cmd_load, "load result topics into the warehouse")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", help="job config YAML (default: jobs/config/streaming.yaml)")
        p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack)")
        if name == "run":
            p.add_argument("--job", choices=["attribution", "gpu-cost", "roi"],
                           default="attribution")
            p.add_argument("--bounded", action="store_true",
                           help="stop at the end of the input present at start")
        else:
            p.add_argument("--follow", action="store_true", help="keep loading new results")
        p.set_defaults(func=func)

    from jobs.cluster import add_parser as add_cluster_parser

    add_cluster_parser(sub)

    from jobs.reconcile import add_parser as add_reconcile_parser

    add_reconcile_parser(sub)

    from jobs.backfill import add_parsers as add_backfill_parsers

    add_backfill_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # kafka-python logs every refused connection while a broker starts; failures that
        # matter reach the user as errors anyway.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        # py4j logs every call of a JVM that died, hundreds of lines; the error says it once
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    try:
        return int(args.func(args) or 0)
    except (CliError, ConfigError, StackError, InputError, FileNotFoundError,
            ValueError) as error:
        print(f"seedance: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seedance: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
