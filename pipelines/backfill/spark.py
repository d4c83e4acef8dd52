"""The backfill on PySpark: the stream's computation over a date range, in batch.

ingest     the raw archive (Parquet by event date, `pipelines.backfill.archive`) or the spans topic
           itself (spark-sql-kafka, starting at a timestamp, read_committed), decoded with
           the stream's decoder; each event keeps its arrival (its record's timestamp)
journeys   repartition by user, sort each partition by user and event time, and run the
           stream's journey step over each partition's Arrow batches (mapInPandas), on
           the events that count by arrival (`frames.counted_by_arrival`, udfs/journeys/arrival.py)
credits    per-conversion models on each batch of converted journeys (mapInPandas); the
           data-driven ones from per-period path counts summed in Spark, fitted cumulatively
           on the driver (counts are small) and joined back by (period, path)
stage      the credits of every day, partitioned by day, in the work folder; the driver
           links GPU cost through the claimed traces and writes one day at a time

All the logic is in `pipelines.backfill.frames` / `.credits` / `.roi`, over `udfs/`: the
Spark code only moves rows.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's own convention)
from pyspark.sql.utils import AnalysisException

from pipelines.backfill.archive import ARRIVAL, ARRIVAL_KINDS, TIME_COLUMN, file_schema
from pipelines.backfill.config import SparkConfig
from pipelines.backfill.credits import (
    concat_credits,
    conversion_credits,
    data_driven_credits,
    fit_groups,
    fit_weights,
    weight_column,
)
from pipelines.backfill.frames import (
    CREDIT_COLUMNS,
    EVENT_COLUMNS,
    JOURNEY_COLUMNS,
    SORT_KEY,
    BackfillWindow,
    ComputedDays,
    events_of_messages,
    journeys_of_batches,
    spark_schema,
)
from pipelines.backfill.roi import CLAIM_COLUMNS, link_costs
from pipelines.py4j_routing import route_by_gateway
from pipelines.settings.paths import jars_home
from schemas.telemetry import MAX_FUTURE_LIMIT_S
from udfs.journeys import NO_ARRIVAL
from udfs.periods import day_of
from udfs.settings import ComputeSettings

ARROW_TYPES = {"string": "string", "int64": "bigint", "double": "double"}


def kafka_jars() -> list[Path]:
    """spark-sql-kafka and its dependencies, fetched by jobs/setup/bootstrap.sh."""
    folder = jars_home() / "spark"
    jars = sorted(folder.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka") for j in jars):
        raise FileNotFoundError(f"the Spark Kafka connector is missing in {folder}; run "
                                "`make setup` (or `bash jobs/setup/bootstrap.sh`)")
    return jars


def spark_settings(config: SparkConfig, jars: list[Path] | None = None) -> dict[str, str]:
    settings = {
        "spark.driver.memory": config.driver_memory,
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(config.max_records_per_batch),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        **config.conf,
    }
    if jars:
        settings["spark.jars"] = ",".join(str(j) for j in jars)
    return settings


def spark_session(config: SparkConfig, jars: list[Path] | None = None,
                  app_name: str = "seedance-backfill") -> SparkSession:
    """A session with the config's settings; under spark-submit, what its command line set
    wins (master, memory and any --conf)."""
    # Python workers must run this interpreter (its packages), not the first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted: dict[str, str] = {}
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # the submit's JVM holds its --conf settings
        submitted = dict(SparkConf().getAll())
    # a --name given to spark-submit (the DAG's, with the day) is kept; without one
    # spark-submit names the application after its file
    named = submitted.get("spark.app.name", "")
    builder = SparkSession.builder.appName(
        named if named and not named.endswith(".py") else app_name)
    if "spark.master" not in submitted:
        builder = builder.master(config.master)
    for key, value in spark_settings(config, jars).items():
        if key not in submitted:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    route_by_gateway()  # a Flink job in this process keeps its own exception handler
    spark.sparkContext.setLogLevel("WARN")
    return spark


def local_path(path: str) -> Path | None:
    """`path` on this machine's file system; None for hdfs://, s3a:// and the like."""
    if path.startswith("file://"):
        return Path(path.removeprefix("file://"))
    return None if "://" in path else Path(path)


def is_local(path: str) -> bool:
    return local_path(path) is not None


# --- ingest ------------------------------------------------------------------------------

def read_archive(spark: SparkSession, root: str, kind: str, from_ms: int | None,
                 until_ms: int) -> DataFrame:
    """One kind of archived record with event time in [from_ms, until_ms], reading only
    the date folders that can hold them; touchpoints and conversions with their arrival
    (NO_ARRIVAL from files written before it was kept)."""
    schema = file_schema(kind)
    ddl = ", ".join(f"{f.name} {ARROW_TYPES[str(f.type)]}" for f in schema) + ", date string"
    path = f"{root.rstrip('/')}/{kind}"
    empty = spark.createDataFrame([], ddl)
    local = local_path(path)
    if local is not None and not local.is_dir():
        return empty
    try:
        frame = spark.read.schema(ddl).parquet(path)
    except AnalysisException as error:
        if "PATH_NOT_FOUND" in str(error):
            return empty
        raise
    if kind in ARRIVAL_KINDS:
        frame = frame.withColumn(ARRIVAL.name, F.coalesce(F.col(ARRIVAL.name),
                                                          F.lit(NO_ARRIVAL).cast("bigint")))
    column = F.col(TIME_COLUMN[kind])
    frame = frame.where((F.col("date") <= day_of(until_ms)) & (column <= until_ms))
    if from_ms is not None:
        frame = frame.where((F.col("date") >= day_of(from_ms)) & (column >= from_ms))
    return frame


def archive_events(spark: SparkSession, root: str, window: BackfillWindow) -> DataFrame:
    until = window.events_until_ms
    touches = read_archive(spark, root, "touchpoints", window.touches_from_ms, until).select(
        "user_id", "ts_ms", F.lit(False).alias("is_conversion"), "channel", "campaign",
        F.lit("").alias("order_id"), F.lit(0.0).alias("revenue"), F.lit("").alias("currency"),
        "trace_id", ARRIVAL.name)
    orders = read_archive(spark, root, "conversions", window.conversions_from_ms, until).select(
        "user_id", "ts_ms", F.lit(True).alias("is_conversion"), F.lit("").alias("channel"),
        F.lit("").alias("campaign"), "order_id", "revenue", "currency", "trace_id",
        ARRIVAL.name)
    return touches.unionByName(orders)


def kafka_events(spark: SparkSession, bootstrap: str, topic: str, encoding: str,
                 window: BackfillWindow, properties: dict[str, str] | None = None
                 ) -> DataFrame:
    """The window's events straight from the spans topic. Records are found by their Kafka
    timestamp (arrival; at most event_time.max_future_s before the event time, which the
    decoder enforces), so reading starts at the first event time needed minus the largest
    limit the config allows (MAX_FUTURE_LIMIT_S); with data-driven models (all history) at
    the earliest offset. Each event keeps its record's timestamp as its arrival."""
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("kafka.isolation.level", "read_committed")
              .option("endingOffsets", "latest"))
    for key, value in (properties or {}).items():
        reader = reader.option(f"kafka.{key}", value)
    start = window.conversions_from_ms
    if start is None:
        reader = reader.option("startingOffsets", "earliest")
    else:
        reader = (reader.option("startingTimestamp",
                                str(max(start - int(MAX_FUTURE_LIMIT_S * 1000), 0)))
                  # a partition with nothing that recent: start at its end, not fail
                  .option("startingOffsetsByTimestampStrategy", "latest"))

    def decode(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            yield events_of_messages(batch.value, encoding, batch.arrival_ms)

    events = reader.load().select("value", F.unix_millis("timestamp").alias("arrival_ms")) \
        .mapInPandas(decode, spark_schema(EVENT_COLUMNS))
    events = events.where(F.col("ts_ms") <= window.events_until_ms)
    if window.touches_from_ms is not None and window.conversions_from_ms is not None:
        events = events.where(F.col("ts_ms") >= F.when(
            F.col("is_conversion"), F.lit(window.conversions_from_ms))
            .otherwise(F.lit(window.touches_from_ms)))
    return events


# --- transform ---------------------------------------------------------------------------

def journeys_frame(events: DataFrame, settings: ComputeSettings, window: BackfillWindow,
                   partitions: int) -> DataFrame:
    """The journeys the window needs (JOURNEY_COLUMNS): each user's events in one
    partition, in the stream's order, through the journey step."""

    def journeys(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        return journeys_of_batches(batches, settings, window)

    return (events.repartition(partitions, "user_id")
            .sortWithinPartitions(*SORT_KEY)
            .mapInPandas(journeys, spark_schema(JOURNEY_COLUMNS)))


def fitted_weights(spark: SparkSession, journeys: DataFrame, conversions: DataFrame,
                   settings: ComputeSettings, progress: Callable[[str], None]) -> DataFrame:
    """The data-driven weights (period_end_ms, path, w_<model>) of the paths converting on
    the window's days, each fitted on the counts of every journey closed by the end of its
    period. The counts are small: summed in Spark, collected, broadcast; the periods are
    fitted in contiguous groups in parallel, each group from its own cumulative prefix."""
    counts = (journeys.where(F.col("counted"))
              .groupBy("period_end_ms", "path")
              .agg(F.sum(F.col("converted").cast("double")).alias("conversions"),
                   F.sum((~F.col("converted")).cast("double")).alias("non_conversions"))
              .toPandas())
    needed = conversions.select("period_end_ms", "path").distinct()
    periods = [r.period_end_ms for r in needed.select("period_end_ms").distinct().collect()]
    groups = max(1, min(len(periods), 3 * spark.sparkContext.defaultParallelism))
    group_of = spark.createDataFrame(list(fit_groups(counts, periods, groups).items()),
                                     "period_end_ms bigint, fit_group int")
    shared = spark.sparkContext.broadcast(counts)
    progress(f"data-driven models: {len(periods):,} refit periods to fit on {len(counts):,} "
             f"(period, path) counts, in {groups} parallel groups")

    def fit(frame: pd.DataFrame) -> pd.DataFrame:
        return fit_weights(shared.value, frame, settings)

    schema = "period_end_ms bigint, path string, " + ", ".join(
        f"{weight_column(m)} array<double>" for m in settings.data_driven)
    return needed.join(F.broadcast(group_of), "period_end_ms") \
        .groupBy("fit_group").applyInPandas(fit, schema)


def credits_frame(spark: SparkSession, journeys: DataFrame, settings: ComputeSettings,
                  progress: Callable[[str], None]) -> DataFrame:
    """Credit rows (CREDIT_COLUMNS) of the conversions on the window's days."""
    conversions = journeys.where(F.col("in_days"))
    if settings.data_driven:
        fitted = fitted_weights(spark, journeys, conversions, settings, progress)
        conversions = conversions.join(fitted, ["period_end_ms", "path"])

    def credit(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for batch in batches:
            yield concat_credits([conversion_credits(batch, settings),
                                  data_driven_credits(batch, settings)])

    return conversions.mapInPandas(credit, spark_schema(CREDIT_COLUMNS))


def claims_of_costs(spark: SparkSession, journeys: DataFrame,
                    costs: pd.DataFrame) -> pd.DataFrame:
    """The claims (trace, conversion) of the traces that carry GPU cost (few)."""
    traces = costs.trace_id[costs.trace_id != ""].drop_duplicates()
    if not len(traces):
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    wanted = spark.createDataFrame(pd.DataFrame({"trace_id": traces}), "trace_id string")
    return (journeys.where(F.col("claims") & F.col("converted"))
            .select(F.explode("trace_ids").alias("trace_id"), "order_id", "conversion_ts_ms")
            .join(wanted, "trace_id", "left_semi")
            .toPandas())


# --- run -----------------------------------------------------------------------------------

def compute(spark: SparkSession, events: DataFrame, window: BackfillWindow,
            settings: ComputeSettings, costs: pd.DataFrame, work_dir: str,
            progress: Callable[[str], None] = print) -> ComputedDays:
    """Compute the window's credits (staged in `work_dir`) and linked GPU cost."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    journeys = journeys_frame(events, settings, window, partitions) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    try:
        progress(f"{journeys.count():,} journeys needed (converted on the days, claiming "
                 "their GPU cost, or counted for the data-driven fits)")
        staged = f"{work_dir.rstrip('/')}/credits"
        credits_frame(spark, journeys, settings, progress) \
            .write.mode("overwrite").partitionBy("day").parquet(staged)
        progress(f"credits staged in {staged}")
        claims = claims_of_costs(spark, journeys, costs)
    finally:
        journeys.unpersist()
    compute_cost, unlinked = link_costs(costs, claims, settings, window.days)
    return ComputedDays(lambda day: staged_credits(spark, staged, day), compute_cost, unlinked,
                        cleanup=lambda: remove_staging(work_dir))


def staged_credits(spark: SparkSession, staged: str, day: str) -> pd.DataFrame:
    """One day's credits back from the staging folder (pyarrow locally, Spark elsewhere)."""
    columns = [c for c in CREDIT_COLUMNS if c != "day"]
    local = local_path(staged)
    if local is None:
        frame = (spark.read.schema(spark_schema(CREDIT_COLUMNS)).parquet(staged)
                 .where(F.col("day") == day).toPandas())
        return frame[list(CREDIT_COLUMNS)]
    folder = local / f"day={day}"
    if not folder.is_dir():
        frame = pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    else:
        frame = pq.read_table(folder, columns=columns).to_pandas()
    return frame.assign(day=day)[list(CREDIT_COLUMNS)]


def remove_staging(work_dir: str) -> None:
    local = local_path(work_dir)
    if local is not None:
        shutil.rmtree(local, ignore_errors=True)
