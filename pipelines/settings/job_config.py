"""Typed, validated configuration of the streaming job, loaded from YAML.

Unknown keys are rejected (a typo must not silently fall back to a default); addresses and
secrets may come from environment variables (pipelines/settings/environment.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from pipelines.codec.landings import SHIPPED_CHANNEL_RULES
from pipelines.codec.ltv_models import allocation_model
from pipelines.settings.job_sections import (
    ExperimentsConfig,
    IncrementalityConfig,
    LtvConfig,
    OrderChangesConfig,
)
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.settings.secrets import readable_secret
from pipelines.settings.sections import ConfigError, build_section
from pipelines.settings.shared import WAREHOUSE_URL, KafkaSection, WarehouseSection, with_overrides
from pipelines.settings.topics import TopicsConfig
from schemas.telemetry import MAX_FUTURE_LIMIT_S
from udfs.attribution import ModelParams, validate_models
from udfs.journeys import JourneyConfig
from udfs.lifecycle import STAGES, StageWeights
from udfs.ltv import (
    BASES,
    DEFAULT_SEGMENT_WEIGHTS,
    LIFECYCLE_STAGE,
    LTV_SEGMENT,
    SegmentWeights,
)
from udfs.orders import OrderMappingError, load_order_mapping
from udfs.periods import DAY_MS
from udfs.settings import ComputeSettings
from udfs.traffic import ChannelRulesError, load_channel_rules

# The YAML lives with the other operator-facing files in jobs/config/.
DEFAULT_CONFIG = PROJECT_ROOT / "jobs" / "config" / "streaming.yaml"
ENV_OVERRIDES = (WAREHOUSE_URL,)  # applied by load_config before the config is built


@dataclass(frozen=True)
class InputConfig:
    encoding: str = "auto"
    starting_offsets: str = "committed"
    group_id: str = "seedance-attribution"
    bounded: bool = False


@dataclass(frozen=True)
class EventTimeConfig:
    max_out_of_orderness_s: float = 300.0
    idleness_s: float = 10.0
    # a partition is idle after idleness_s only once read to its end; where that cannot be
    # known (the broker does not answer), after this long without records
    backlog_idleness_s: float = 300.0
    # > 0: Flink's watermark alignment pauses a partition whose watermark runs this far
    # ahead of the slowest, bounding what waits in the journeys during a catch-up (Flink 2.2
    # also caps a catch-up at about this much event time per watermark interval)
    max_drift_s: float = 0.0
    watermark_interval_s: float = 1.0
    # a span starting further ahead of the clock is a dead letter (a skewed clock): it
    # would move its partition's event time and make the partition's next spans late
    max_future_s: float = 300.0


@dataclass(frozen=True)
class AttributionConfig:
    models: tuple[str, ...] = ("last_click", "first_click", "linear", "position_based",
                               "time_decay", "shapley_simplified", "shapley", "markov")
    half_life_days: float = ModelParams.half_life_days
    markov_order: int = ModelParams.markov_order
    refit_every_s: float = 86400.0


# records the attribution job's source hands its decoder in one call, at most (each an
# OTLP request of up to a few MiB: a group stays well inside a Python worker's memory)
MAX_BATCH_RECORDS = 4096
GROUP_RECORDS_PER_BUCKET = 4  # by default, a group holds this many records per bucket
STATE_BACKENDS = ("", "hashmap", "rocksdb")


@dataclass(frozen=True)
class FlinkConfig:
    parallelism: int = 1
    checkpoint_interval_s: float = 10.0
    checkpoint_dir: str = ""
    python_execution_mode: str = "thread"
    transaction_timeout_s: int = 900
    resume: bool = True
    accounting_every_s: float = 30.0
    user_buckets: int = 4
    batch_records: int | None = None  # None: `group_records`'s rule
    batch_linger_ms: int | None = None  # None: `group_linger_ms`'s rule
    # how often event time may step the journeys, at most (None: `step_interval_ms`'s rule)
    step_interval_s: float | None = None
    state_backend: str = ""  # hashmap | rocksdb; empty: a cluster's own, hashmap in-process
    restart_attempts: int = 3
    restart_delay_s: float = 2.0


@dataclass(frozen=True)
class GpuConfig:
    metrics_topic: str = "otlp_metrics"
    metrics_dead_letter: str = "otlp_metrics_dlq"
    costs_topic: str = "gpu_costs"
    prices: str = ""
    nominal_interval_s: float = 10.0
    max_gap_s: float = 60.0
    link_timeout_s: float = 600.0
    emit_every_s: float = 60.0


@dataclass(frozen=True)
class RoiConfig:
    currency: str = "USD"
    stage_weights: StageWeights = StageWeights()
    link_window_days: float = 31.0
    retention_days: float = 40.0
    # fully_loaded: each GPU's idle cost follows its calls to their orders; direct: calls only
    compute_cost: str = "fully_loaded"
    # no ROAS or ROI on a cost under this (in the currency): a few cents of cost give
    # ratios in the millions
    min_cost: float = 1.0
    gross_margin: float = 1.0  # of revenue, for margin ROI = (revenue x margin - cost) / cost
    # the basis of a conversion's cost weight: lifecycle_stage (stage_weights) or
    # ltv_segment (segment_weights, by the customer's LTV segment at the order under the
    # model message in ltv_model: udfs/ltv/allocation.py)
    allocation_weights: str = LIFECYCLE_STAGE
    segment_weights: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_SEGMENT_WEIGHTS))
    ltv_model: str = ""  # a model message file (`seedance ltv fit --message-out`)


@dataclass(frozen=True)
class StreamingJobConfig:
    kafka: KafkaSection = KafkaSection()  # as in the reconciliation config (shared.py)
    topics: TopicsConfig = TopicsConfig()
    input: InputConfig = InputConfig()
    event_time: EventTimeConfig = EventTimeConfig()
    journey: JourneyConfig = JourneyConfig()
    order_changes: OrderChangesConfig = OrderChangesConfig()
    attribution: AttributionConfig = AttributionConfig()
    flink: FlinkConfig = FlinkConfig()
    gpu: GpuConfig = GpuConfig()
    roi: RoiConfig = RoiConfig()
    experiments: ExperimentsConfig = ExperimentsConfig()
    incrementality: IncrementalityConfig = IncrementalityConfig()
    ltv: LtvConfig = LtvConfig()
    warehouse: WarehouseSection = WarehouseSection()

    def __post_init__(self) -> None:
        checks = [
            (self.input.encoding in ("auto", "otlp_proto", "otlp_json"), "input.encoding",
             "must be auto, otlp_proto or otlp_json"),
            (self.input.starting_offsets in ("committed", "earliest", "latest"),
             "input.starting_offsets", "must be committed, earliest or latest"),
            (self.flink.parallelism >= 1, "flink.parallelism", "must be at least 1"),
            (self.flink.checkpoint_interval_s > 0, "flink.checkpoint_interval_s",
             "must be positive"),
            (self.flink.accounting_every_s > 0, "flink.accounting_every_s", "must be positive"),
            (self.flink.restart_attempts >= 0, "flink.restart_attempts", "must not be negative"),
            (self.flink.restart_delay_s >= 0, "flink.restart_delay_s", "must not be negative"),
            (self.flink.user_buckets >= 1, "flink.user_buckets", "must be at least 1"),
            (self.flink.user_buckets >= self.flink.parallelism, "flink.user_buckets",
             f"({self.flink.user_buckets}) must be at least flink.parallelism "
             f"({self.flink.parallelism}): a bucket is the smallest unit of work"),
            (self.flink.batch_records is None
             or 1 <= self.flink.batch_records <= MAX_BATCH_RECORDS, "flink.batch_records",
             f"must be between 1 and {MAX_BATCH_RECORDS}"),
            (self.flink.batch_linger_ms is None or self.flink.batch_linger_ms >= 0,
             "flink.batch_linger_ms", "must not be negative (null: the step interval)"),
            (self.flink.step_interval_s is None or self.flink.step_interval_s >= 0,
             "flink.step_interval_s", "must not be negative (null: by the buckets per "
             "subtask)"),
            (self.flink.state_backend in STATE_BACKENDS, "flink.state_backend",
             "must be hashmap or rocksdb (or empty: the cluster's own)"),
            (self.flink.python_execution_mode in ("thread", "process"),
             "flink.python_execution_mode", "must be thread or process"),
            (self.event_time.max_out_of_orderness_s >= 0, "event_time.max_out_of_orderness_s",
             "must not be negative"),
            (self.event_time.watermark_interval_s > 0, "event_time.watermark_interval_s",
             "must be positive"),
            (self.event_time.max_drift_s >= 0, "event_time.max_drift_s",
             "must not be negative (0: no alignment)"),
            (self.gpu.nominal_interval_s > 0, "gpu.nominal_interval_s", "must be positive"),
            (self.gpu.emit_every_s > 0, "gpu.emit_every_s", "must be positive"),
            (self.gpu.max_gap_s >= self.gpu.nominal_interval_s, "gpu.max_gap_s",
             "must be at least gpu.nominal_interval_s"),
            (self.attribution.half_life_days > 0, "attribution.half_life_days",
             "must be positive"),
            (self.attribution.markov_order >= 1, "attribution.markov_order",
             "must be at least 1"),
            (self.attribution.refit_every_s >= 1, "attribution.refit_every_s",
             "must be at least 1 second"),
            (self.roi.link_window_days > 0, "roi.link_window_days", "must be positive"),
            (self.order_changes.window_days > 0, "order_changes.window_days",
             "must be positive"),
            (bool(self.order_changes.mapping) or not self.order_changes.topic,
             "order_changes.mapping", "is needed with order_changes.topic: the file that "
             "names the orders table's columns (docs/order-changes.md)"),
            (0 < self.event_time.max_future_s <= MAX_FUTURE_LIMIT_S, "event_time.max_future_s",
             f"must be between 0 and {MAX_FUTURE_LIMIT_S:.0f} seconds"),
            (self.roi.retention_days >= 1, "roi.retention_days", "must be at least 1"),
            (self.roi.compute_cost in ("fully_loaded", "direct"), "roi.compute_cost",
             "must be fully_loaded or direct"),
            (self.roi.min_cost >= 0, "roi.min_cost", "must not be negative"),
            (0 < self.roi.gross_margin <= 1, "roi.gross_margin", "must be in (0, 1]"),
            (bool(self.incrementality.holdout_prefix), "incrementality.holdout_prefix",
             "must not be empty (every flag would be a holdout)"),
            (self.incrementality.exposed_variant != self.incrementality.held_out_variant,
             "incrementality.held_out_variant", "must differ from exposed_variant"),
            (self.experiments.retention_days > 0, "experiments.retention_days",
             "must be positive"),
            (self.experiments.window_days >= 1, "experiments.window_days",
             "must be at least 1"),
            (0 < self.experiments.alpha < 1, "experiments.alpha", "must be between 0 and 1"),
            (self.experiments.min_converters >= 2, "experiments.min_converters",
             "must be at least 2"),
            (self.ltv.period_days > 0, "ltv.period_days", "must be positive"),
            (self.ltv.horizon_days >= 1, "ltv.horizon_days", "must be at least 1"),
            (self.ltv.discount_rate > -1, "ltv.discount_rate", "must be above -1"),
            (self.experiments.cost_model in ("", *self.attribution.models),
             "experiments.cost_model",
             f"({self.experiments.cost_model}) must be one of attribution.models"),
        ]
        for ok, key, problem in checks:
            if not ok:
                raise ConfigError(f"{key} {problem}")
        try:
            validate_models(self.attribution.models)
        except ValueError as error:
            raise ConfigError(f"attribution.models: {error}") from None
        if not self.attribution.models:
            raise ConfigError("attribution.models must name at least one model")
        self._check_allocation()
        self.computation  # noqa: B018 (built now, so a bad combination fails at load time)

    def _check_allocation(self) -> None:
        roi = self.roi
        if roi.allocation_weights not in BASES:
            raise ConfigError(f"roi.allocation_weights must be one of {', '.join(BASES)}, "
                              f"got {roi.allocation_weights!r}")
        try:
            weights = SegmentWeights(roi.segment_weights)
        except ValueError as error:
            raise ConfigError(f"roi.segment_weights: {error}") from None
        if roi.allocation_weights == LTV_SEGMENT and not roi.ltv_model:
            raise ConfigError("roi.allocation_weights ltv_segment needs roi.ltv_model: the "
                              "allocation model's message file (seedance ltv fit "
                              "--message-out)")
        if roi.ltv_model:
            try:
                weights.check_names(allocation_model(roi.ltv_model).names)
            except ValueError as error:
                raise ConfigError(f"roi.ltv_model: {error}") from None

    @property
    def experiment_cost_model(self) -> str:
        """The model whose allocated costs an experiment's orders carry."""
        models = self.attribution.models
        return self.experiments.cost_model or ("last_click" if "last_click" in models
                                               else models[0])

    @cached_property
    def computation(self) -> ComputeSettings:
        """What the stream, the backfill and `seedance attribute` compute with."""
        attribution, roi = self.attribution, self.roi
        return ComputeSettings(
            journey=self.journey, models=attribution.models,
            params=ModelParams(half_life_days=attribution.half_life_days,
                               markov_order=attribution.markov_order),
            refit_every_ms=int(attribution.refit_every_s * 1000),
            stage_weights=roi.stage_weights,
            link_window_ms=int(roi.link_window_days * DAY_MS), currency=roi.currency,
            compute_cost=roi.compute_cost, min_cost=roi.min_cost,
            gross_margin=roi.gross_margin, allocation_basis=roi.allocation_weights,
            segment_weights=SegmentWeights(roi.segment_weights),
            segmenter=allocation_model(roi.ltv_model) if roi.ltv_model else None)

    def replace(self, section: str, **changes: Any) -> StreamingJobConfig:
        """A copy with some keys of one section changed (used by CLI flags and tests)."""
        updated = dataclasses.replace(getattr(self, section), **changes)
        return dataclasses.replace(self, **{section: updated})


# Sections that, when given, must give every key: half a set of stage weights filled up
# with defaults (or an empty one read as the defaults) is a mistake nobody would notice.
_COMPLETE: dict[type, tuple[str, ...]] = {StageWeights: STAGES}


def read_yaml(source: Path) -> dict[str, Any]:
    """A job config file's mapping, or a ConfigError naming the file (every job's loader)."""
    try:
        data = yaml.safe_load(Path(source).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {source}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{source}: not a text file (byte {error.start} is not UTF-8)"
                          ) from None
    except OSError as error:  # a folder, no permission
        raise ConfigError(f"{source}: cannot read it: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {data!r}")
    problem = readable_secret(Path(source), data)
    if problem:
        raise ConfigError(problem)
    return data


def load_config(path: Path | None = None) -> StreamingJobConfig:
    """Load a job config (defaults when path is None) with its environment override,
    SEEDANCE_WAREHOUSE_URL (pipelines/settings/shared.py)."""
    source = path or DEFAULT_CONFIG
    data = read_yaml(source)
    try:
        config: StreamingJobConfig = build_section(
            StreamingJobConfig, with_overrides(data, ENV_OVERRIDES), "", _COMPLETE)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    # files the config names, relative to its folder: checked now (a mistake names the
    # config, the file, its line and field) and named absolutely, as the job reads them
    # where it is built
    rules = config.journey.channel_rules
    if rules:
        where = _beside(source, rules)
        try:
            load_channel_rules(where)
        except ChannelRulesError as error:
            raise ConfigError(f"{source}: journey.channel_rules: {error}") from None
        config = config.replace("journey", channel_rules=str(where))
    if config.order_changes.mapping:
        where = _beside(source, config.order_changes.mapping)
        try:
            load_order_mapping(where)
        except OrderMappingError as error:
            raise ConfigError(f"{source}: order_changes.mapping: {error}") from None
        config = config.replace("order_changes", mapping=str(where))
    if config.incrementality.studies:  # read (and checked) by `seedance incrementality`
        config = config.replace("incrementality", studies=str(
            _beside(source, config.incrementality.studies)))
    return config


def _beside(config_file: Path, named: str) -> Path:
    """A file a config names: as it is when absolute, else in the config file's folder."""
    path = Path(named)
    return (path if path.is_absolute() else Path(config_file).parent / path).resolve()


def order_mapping_text(config: StreamingJobConfig) -> tuple[str, str]:
    """(the text, the file) of the orders table's mapping, read where the job is built."""
    where = Path(config.order_changes.mapping)
    return where.read_text(encoding="utf-8"), str(where)


def channel_rules_text(config: StreamingJobConfig) -> tuple[str, str]:
    """(the text, the file) of the job's channel rules, read where the job is built so
    that its TaskManagers need not have the file."""
    where = Path(config.journey.channel_rules) if config.journey.channel_rules \
        else SHIPPED_CHANNEL_RULES
    return where.read_text(encoding="utf-8"), str(where)
