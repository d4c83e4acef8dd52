"""Flink plumbing shared by the jobs: Kafka sources and exactly-once sinks, settings."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pyflink.common import Configuration, JobExecutionResult, WatermarkStrategy
from pyflink.common.serialization import (
    ByteArraySchema,
    SerializationSchema,
    SimpleStringSchema,
)
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.java_gateway import get_gateway
from pyflink.util.java_utils import add_jars_to_context_class_loader

from pipelines.flink.jobs import StreamingJob
from pipelines.kafka.security import for_flink
from pipelines.py4j_routing import route_by_gateway
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.settings.paths import flink_connector_jars, state_home
from pipelines.settings.stepping import group_linger_ms, group_records, step_interval_ms

log = logging.getLogger(__name__)


def _kafka_properties(config: StreamingJobConfig) -> dict[str, str]:
    # the connector relocates the Kafka client: class names in the settings follow it
    return for_flink(dict(config.kafka.properties))


# build_source's signal for records that are no OTLP: framed for their place alone
PLACE_ONLY = "NONE"


def build_source(config: StreamingJobConfig, bootstrap: str, topic: str,
                 group_suffix: str = "", framed_max_future_ms: int | None = None,
                 signal: str = "TRACES") -> KafkaSource:
    """Each record's value as bytes; with `framed_max_future_ms`, each record framed
    (pipelines.codec.frame: partition, offset, event time, null values kept; times further
    ahead of the clock than that are not event time) with the event time of its `signal`
    (TRACES: the newest span start, METRICS: the newest data point; PLACE_ONLY: no event
    time, the frame only says where the record came from)."""
    starting = {
        "earliest": KafkaOffsetsInitializer.earliest(),
        "latest": KafkaOffsetsInitializer.latest(),
        "committed": KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST),
    }[config.input.starting_offsets]
    builder = (KafkaSource.builder()
               .set_bootstrap_servers(bootstrap)
               .set_topics(topic)
               .set_group_id(config.input.group_id + group_suffix)
               .set_starting_offsets(starting)
               .set_property("commit.offsets.on.checkpoint", "true")
               # results of exactly-once jobs count only once committed
               .set_property("isolation.level", "read_committed"))
    if framed_max_future_ms is None:
        builder = builder.set_value_only_deserializer(ByteArraySchema())
    else:
        # reports what it reads under the group: the watermarks' idleness asks (PartitionLag)
        builder._j_builder.setDeserializer(
            _job_classes().io.seedance.flink.FramedOtlpDeserializer(
                framed_max_future_ms, signal, config.input.group_id + group_suffix))
    for key, value in _kafka_properties(config).items():
        builder = builder.set_property(key, value)
    if config.input.bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    return builder.build()


def otlp_event_time(config: StreamingJobConfig, bootstrap: str | None = None,
                    topic: str | None = None, group_suffix: str = "") -> WatermarkStrategy:
    """Watermarks made per Kafka partition inside the source, from each framed record's event
    time (io.seedance.flink.LagAwareWatermarks): a subtask's watermark is the minimum over
    its partitions; a partition silent for `event_time.idleness_s` stops holding it back
    once everything in it has been read (the broker's end offsets for `topic`, asked with
    the job's client settings, against what the source read under its group), or after
    `event_time.backlog_idleness_s` of silence where that cannot be known."""
    event_time = config.event_time
    idleness_ms = int(event_time.idleness_s * 1000)
    backlog_idleness_ms = int(event_time.backlog_idleness_s * 1000)
    if config.input.bounded:
        # a bounded run reads to known ends: no partition is idle, only not read yet. Marked
        # idle, it would let a subtask that finished first (its final watermark) take the
        # watermark to the end of time while this one's data still waits: then nothing
        # after it would ever be stepped
        idleness_ms = backlog_idleness_ms = NEVER_IDLE_MS
    jvm = _job_classes()
    out_of_orderness_ms = int(event_time.max_out_of_orderness_s * 1000)
    if bootstrap is None or topic is None:
        return WatermarkStrategy(jvm.io.seedance.flink.LagAwareWatermarks(
            out_of_orderness_ms, idleness_ms, backlog_idleness_ms))
    client = jvm.java.util.Properties()
    client.setProperty("bootstrap.servers", bootstrap)
    client.setProperty("isolation.level", "read_committed")  # as the source reads
    client.setProperty("group.id", config.input.group_id + group_suffix)
    for key, value in _kafka_properties(config).items():
        client.setProperty(key, value)
    strategy = jvm.io.seedance.flink.LagAwareWatermarks(
        out_of_orderness_ms, idleness_ms, backlog_idleness_ms,
        config.input.group_id + group_suffix, topic, client, config.input.starting_offsets)
    if event_time.max_drift_s > 0:
        # split level: a partition running ahead of the slowest by the drift is paused
        # (one group per topic and consumer group: the job's sources of it)
        duration = jvm.java.time.Duration
        strategy = strategy.withWatermarkAlignment(
            f"{config.input.group_id}{group_suffix}/{topic}",
            duration.ofMillis(int(event_time.max_drift_s * 1000)),
            duration.ofMillis(int(event_time.watermark_interval_s * 1000)))
    return WatermarkStrategy(strategy)


NEVER_IDLE_MS = 100 * 365 * 86_400_000  # a century: longer than any run


def from_kafka(env: StreamExecutionEnvironment, source: KafkaSource,
               watermarks: WatermarkStrategy, name: str, uid: str) -> DataStream:
    """`env.from_source(source, watermarks, name).uid(uid)`, followed by the operator that
    lets a drain's final watermark through an idle source (io.seedance.flink.FinalWatermark,
    chained behind it: Flink 2.2 drops the final watermark of a source whose partitions
    were all idle at the drain, so nothing it would release was ever committed)."""
    stream = env.from_source(source, watermarks, name).uid(uid)
    j_stream = stream._j_data_stream
    final = j_stream.transform(f"{name}-final-watermark", j_stream.getType(),
                               _job_classes().io.seedance.flink.FinalWatermark())
    return DataStream(final).uid(f"{uid}-final-watermark")


# a group's bytes at most, whatever its record count (a Python worker holds it whole)
MAX_BATCH_BYTES = 64 * 1024 * 1024


def grouped(stream: DataStream, config: StreamingJobConfig, name: str, uid: str) -> DataStream:
    """Framed records grouped for one Python call each (io.seedance.flink.FrameBatches:
    up to `group_records(config)` records or MAX_BATCH_BYTES, `group_linger_ms(config)` at
    most, closed before every watermark that goes on and every checkpoint barrier; it keeps
    no state). Watermarks go on at most every `step_interval_ms(config)`."""
    j_stream = stream._j_data_stream
    batches = _job_classes().io.seedance.flink.FrameBatches(
        group_records(config), MAX_BATCH_BYTES, group_linger_ms(config),
        step_interval_ms(config))
    return DataStream(j_stream.transform(name, j_stream.getType(), batches)).uid(uid)


def stay_active(stream: DataStream, name: str, uid: str) -> DataStream:
    """`stream` through io.seedance.flink.StayActive: its output is never announced idle,
    so the operator it feeds waits for its watermarks (behind a key-by, where an idle
    announcement only lets the watermark pass records still on their way)."""
    j_stream = stream._j_data_stream
    active = j_stream.transform(name, j_stream.getType(),
                                _job_classes().io.seedance.flink.StayActive())
    return DataStream(active).uid(uid)


def _job_classes():  # noqa: ANN202 (py4j's JVM view)
    """The JVM, with the project's jars loadable by this client (py4j builds the source's
    deserializer and the event-time assigner here, before the job is submitted). The
    gateway may start here, before any job: the Python a thread-mode job embeds is fixed
    then (prefer_this_python)."""
    prefer_this_python()
    add_jars_to_context_class_loader([jar.as_uri() for jar in flink_connector_jars()])
    return get_gateway().jvm


def build_sink(config: StreamingJobConfig, bootstrap: str, topic: str,
               job: str = "attribution", raw: bool = False, keyed: bool = False) -> KafkaSink:
    """Exactly-once: records become visible to read_committed readers at checkpoints.
    `raw`: the records are byte arrays (UTF-8 already), written as they are. `keyed`: the
    records are `key + "\n" + value` (`keyed_line`; raw: table_messages.keyed), written with
    that key, so every version of what one key stands for goes to one partition, in
    order."""
    builder = KafkaRecordSerializationSchema.builder().set_topic(topic)
    if keyed:
        jvm = _job_classes().io.seedance.flink
        key, value = (jvm.KeyedBytesKey(), jvm.KeyedBytesValue()) if raw \
            else (jvm.KeyedLineKey(), jvm.KeyedLineValue())
        builder = (builder
                   .set_key_serialization_schema(SerializationSchema(key))
                   .set_value_serialization_schema(SerializationSchema(value)))
    else:
        builder = builder.set_value_serialization_schema(ByteArraySchema() if raw
                                                         else SimpleStringSchema())
    serializer = builder.build()
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(bootstrap)
            .set_record_serializer(serializer)
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            # unique per job and topic: two jobs' transactions must never fence each other
            .set_transactional_id_prefix(f"{config.input.group_id}-{job}-{topic}")
            .set_property("transaction.timeout.ms",
                          str(config.flink.transaction_timeout_s * 1000)))
    for key, value in _kafka_properties(config).items():
        sink = sink.set_property(key, value)
    return sink.build()


def keyed_line(key: tuple[object, ...], value: str) -> str:
    """A record for a `keyed` sink: the row's key (a JSON array) and its value."""
    return json.dumps(key, separators=(",", ":")) + "\n" + value


def prefer_this_python() -> None:
    """Thread mode embeds the Python found first on PATH (through pemja): make it this one.

    Must happen before the Flink gateway JVM starts, which inherits the environment.
    """
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def separate_python_workers(config: StreamingJobConfig) -> None:
    """In process mode, give the in-process MiniCluster real Python worker processes.

    Left alone, PyFlink runs a MiniCluster's "process mode" workers as threads of this
    client process ("loopback"), so every operator shares one interpreter lock and the job
    uses one core, as in thread mode. Separate workers (what a real cluster starts) let the
    decoding and the journeys run on different cores (bench/streaming.py measures both).
    The switch is the environment variable PyFlink reads when the job is submitted.
    """
    if config.flink.python_execution_mode == "process":
        os.environ.setdefault("_python_worker_execution_mode", "process")


def checkpoint_root(config: StreamingJobConfig, job_name: str) -> str:
    """Each job checkpoints under a folder of its own (path or URI)."""
    base = config.flink.checkpoint_dir or str(state_home() / "checkpoints")
    if "://" not in base:
        base = Path(base).resolve().as_uri()
    return f"{base.rstrip('/')}/{job_name}"


def latest_checkpoint(root: str) -> Path | None:
    """The newest complete checkpoint (a chk-N folder with its _metadata) of a local root."""
    if not root.startswith("file:"):
        return None
    folder = Path(root.removeprefix("file://"))
    complete = [m.parent for m in folder.glob("*/chk-*/_metadata")]
    return max(complete, key=lambda p: p.stat().st_mtime) if complete else None


def flink_configuration(config: StreamingJobConfig, local: bool = True,
                        job_name: str = "seedance-attribution") -> Configuration:
    """Job settings; `local` adds what only an in-process MiniCluster needs (jars, Python)."""
    checkpoints = checkpoint_root(config, job_name)
    conf = Configuration()
    if local:
        conf.set_string("pipeline.jars", ";".join(p.as_uri() for p in flink_connector_jars()))
        conf.set_string("python.executable", sys.executable)
        conf.set_string("python.client.executable", sys.executable)
    conf.set_string("python.execution-mode", config.flink.python_execution_mode)
    conf.set_string("pipeline.auto-watermark-interval",
                    f"{int(config.event_time.watermark_interval_s * 1000)} ms")
    conf.set_string("execution.checkpointing.interval",
                    f"{int(config.flink.checkpoint_interval_s * 1000)} ms")
    conf.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    conf.set_string("execution.checkpointing.dir", checkpoints)
    # kept when the job is cancelled (Ctrl-C) so that the next run can resume from it
    conf.set_string("execution.checkpointing.externalized-checkpoint-retention",
                    "RETAIN_ON_CANCELLATION")
    conf.set_string("execution.checkpointing.storage", "filesystem")
    # the state backend: the config's, else the cluster's own (a `flink run` leaves it out:
    # jobs/flink_entry.py), else in-process the heap
    backend = config.flink.state_backend or ("hashmap" if local else "")
    if backend:
        conf.set_string("state.backend.type", backend)
    if backend == "rocksdb":
        # a checkpoint writes the files that changed since the last one, not all state
        conf.set_string("execution.checkpointing.incremental", "true")
    conf.set_string("restart-strategy.type", "fixed-delay")
    conf.set_string("restart-strategy.fixed-delay.attempts", str(config.flink.restart_attempts))
    conf.set_string("restart-strategy.fixed-delay.delay",
                    f"{int(config.flink.restart_delay_s * 1000)} ms")
    return conf


def run_pipeline(build: Callable[[StreamExecutionEnvironment, StreamingJobConfig, str], None],
                 config: StreamingJobConfig, bootstrap: str, job_name: str,
                 env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    """Build and run a job; blocks until a bounded job finishes (or forever, unbounded).

    Without `env`, Flink runs in a MiniCluster of its own inside this process.
    """
    if env is None:
        prefer_this_python()
        separate_python_workers(config)
        conf = flink_configuration(config, job_name=job_name)
        resume_from = latest_checkpoint(checkpoint_root(config, job_name)) \
            if config.flink.resume else None
        if resume_from is not None:
            # state (journeys, open intervals) and source offsets come back together
            log.warning("resuming %s from checkpoint %s", job_name, resume_from)
            print(f"Resuming from checkpoint {resume_from}", flush=True)
            conf.set_string("execution.state-recovery.path", resume_from.as_uri())
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(config.flink.parallelism)
    route_by_gateway()  # a Spark session in this process keeps its own exception handler
    build(env, config, bootstrap)
    return env.execute(job_name)


def run_job(job: StreamingJob, config: StreamingJobConfig, bootstrap: str,
            job_name: str | None = None,
            env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    """Build and run a registered job (`run_pipeline`), as `job_name` (default: its
    `flink_name`)."""
    return run_pipeline(job.builder(), config, bootstrap, job_name or job.flink_name, env)
