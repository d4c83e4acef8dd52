"""The streaming jobs, in one registry: each job's name (`seedance run --job`, `seedance
cluster submit --job`, `flink_entry.py --streaming-job`), its builder, its Flink job name
(which also names its checkpoint folder), the topics it reads and writes and the uids of
its operators (what its savepoints are keyed by); and beside them `LOADS`, which sink
loads which topic into which tables of the warehouse.

Every command that lists, submits or runs jobs reads them here. Nothing heavy is imported:
a job's module (PyFlink and all) is imported when its builder is asked for.

Topics are named by where the job config keeps them (`topics.spans`, `gpu.costs_topic`),
never by value: jobs/config/streaming.yaml and pipelines/settings/job_config.py are the
one place topic names are set.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

    from pipelines.settings.job_config import StreamingJobConfig

    Builder = Callable[[StreamExecutionEnvironment, StreamingJobConfig, str], None]


@dataclass(frozen=True)
class StreamingJob:
    name: str  # how commands name it
    title: str  # how their messages call it: "Running the {title} job ..."
    flink_name: str  # the Flink job's name by default; its checkpoints' folder
    builder_path: str  # "module:function" of its build_*_pipeline(env, config, bootstrap)
    reads: tuple[str, ...]  # job config attributes naming the topics it reads
    writes: tuple[str, ...]  # ... and the topics it writes
    flow: str  # what `seedance run` says it does, its topics as {topics.spans} etc.
    uids: tuple[str, ...]  # its operators' uids (its sources' own final-watermark
    #                        operators add "-final-watermark" to theirs)
    # of its topics, those read as the latest message per key: created compacted
    compacted: tuple[str, ...] = ()
    # its sources' consumer group is input.group_id + this (their build_source group_suffix)
    group_suffix: str = ""
    # what it keeps between messages, which a start without its savepoint does not have
    state: str = "its keyed state"

    def group(self, config: StreamingJobConfig) -> str:
        """The consumer group its sources read and commit their offsets as."""
        return config.input.group_id + self.group_suffix

    def read_topics(self, config: StreamingJobConfig) -> list[str]:
        """The topics it reads, as `config` names them."""
        return unique(attrgetter(path)(config) for path in self.reads)

    def builder(self) -> Builder:
        """The job's build function (its module imported now)."""
        module, function = self.builder_path.split(":")
        build: Builder = getattr(importlib.import_module(module), function)
        return build

    def topics(self, config: StreamingJobConfig) -> list[str]:
        """The topics it reads, then those it writes, each once, as `config` names them."""
        return unique(attrgetter(path)(config) for path in self.reads + self.writes)

    def describe(self, config: StreamingJobConfig) -> str:
        """`flow` with the topics of `config`."""
        return self.flow.format(**{f.name: getattr(config, f.name) for f in fields(config)})

    def topic_settings(self, config: StreamingJobConfig) -> dict[str, dict[str, str]]:
        """Settings beyond the defaults of those of its topics that need some, as `config`
        names them (`topic_settings` of all jobs)."""
        return topic_settings([self], config)

    @property
    def keeps_accounting(self) -> bool:
        """It writes running totals (`topics.accounting`) that add up or not."""
        return "topics.accounting" in self.writes


def unique(names: Iterable[str]) -> list[str]:
    """`names` in order, each once."""
    return list(dict.fromkeys(names))


COMPACTED = {"cleanup.policy": "compact"}  # a topic that keeps the latest message per key


def topic_settings(jobs: Iterable[StreamingJob],
                   config: StreamingJobConfig) -> dict[str, dict[str, str]]:
    """Topic settings beyond the defaults (pipelines.kafka.io.ensure_topics' `settings`) of
    these jobs' topics that need some: the compacted ones."""
    return {attrgetter(path)(config): dict(COMPACTED) for job in jobs for path in job.compacted}


ATTRIBUTION = StreamingJob(
    "attribution", "attribution", "seedance-attribution",
    "pipelines.flink.attribution.job:build_pipeline",
    reads=("topics.spans",),
    writes=("topics.credits", "topics.dead_letter", "topics.late", "topics.conversions",
            "topics.accounting"),
    flow="{topics.spans} -> {topics.credits} (dead letters: {topics.dead_letter}, late: "
         "{topics.late})",
    uids=("source-otlp-spans", "source-otlp-spans-groups", "decode-otlp",
          "source-order-changes", "source-order-changes-groups", "decode-order-changes",
          "dedup-orders-by-order-id", "attribute-journeys-by-bucket",
          "fit-data-driven-models-by-period", "credit-data-driven-models-by-bucket",
          "count-late", "count-duplicate-orders",
          "run-accounting", "credits-sink", "dead-letter-sink", "late-events-sink",
          "conversions-sink", "accounting-sink"),
    state="the journeys in progress (touches waiting for a conversion), the order ids already "
          "credited, the counts per path the data-driven models are fitted on and the conversions "
          "they credit")

GPU_COST = StreamingJob(
    "gpu-cost", "GPU cost", "seedance-gpu-cost",
    "pipelines.flink.gpu_cost.job:build_gpu_pipeline",
    reads=("gpu.metrics_topic", "topics.spans"),
    writes=("gpu.costs_topic", "gpu.metrics_dead_letter", "topics.late"),
    flow="{gpu.metrics_topic} + {topics.spans} -> {gpu.costs_topic} (dead letters: "
         "{gpu.metrics_dead_letter})",
    uids=("source-otlp-metrics", "source-otlp-spans-gpu", "decode-gpu-samples",
          "decode-gpu-calls", "link-calls-to-gpus", "cost-per-gpu", "gpu-costs-sink",
          "gpu-dead-letter-sink", "gpu-late-sink"),
    group_suffix="-gpu",
    state="the open GPU sample intervals and the service calls waiting for their link to a "
          "GPU")

ROI = StreamingJob(
    "roi", "ROI", "seedance-roi",
    "pipelines.flink.roi.job:build_roi_pipeline",
    reads=("topics.credits", "topics.conversions", "topics.ad_spend", "gpu.costs_topic"),
    writes=("topics.roi", "topics.roi_dead_letter"),
    flow="{topics.credits} + {topics.conversions} + {topics.ad_spend} + {gpu.costs_topic} "
         "-> {topics.roi} (dead letters: {topics.roi_dead_letter})",
    uids=(*(f"roi-{step}-{kind}" for step in ("source", "decode", "time")
            for kind in ("credit", "conversion", "gpu", "spend")),
          "roi-share-idle-cost", "roi-link-trace-costs", "roi-per-day", "roi-sink",
          "roi-dead-letter-sink",
          # with roi.allocation_weights: ltv_segment
          "roi-time-orders", "roi-segment-orders"),
    group_suffix="-roi",
    state="the days still open (their credits, costs and spend), the costs waiting for "
          "their link window and the customers' order history")

EXPERIMENTS = StreamingJob(
    "experiments", "experiments", "seedance-experiments",
    "pipelines.flink.experiments.job:build_experiments_pipeline",
    reads=("topics.spans", "topics.conversions"),
    writes=("topics.experiment_exposures", "topics.experiment_conversions",
            "topics.dead_letter"),
    flow="{topics.spans} + {topics.conversions} -> {topics.experiment_exposures} + "
         "{topics.experiment_conversions}",
    uids=("experiments-source-spans", "experiments-decode-exposures",
          "experiments-source-conversions", "experiments-decode-conversions",
          "experiments-conversion-time", "experiments-assign-variants",
          "experiments-exposures-sink", "experiments-conversions-sink",
          "experiments-dead-letter-sink"),
    group_suffix="-experiments",
    state="each user's variant assignments and exposures")

LTV = StreamingJob(
    "ltv", "LTV", "seedance-ltv",
    "pipelines.flink.ltv.job:build_ltv_pipeline",
    reads=("topics.conversions", "topics.ltv_models"),
    writes=("topics.customer_ltv", "topics.ltv_dead_letter"),
    flow="{topics.conversions} + {topics.ltv_models} -> {topics.customer_ltv} (dead letters: "
         "{topics.ltv_dead_letter})",
    uids=("ltv-source-conversions", "ltv-decode-conversions", "ltv-conversion-time",
          "ltv-source-models", "ltv-parse-models", "ltv-model-time", "ltv-score-customers",
          "ltv-customers-sink", "ltv-dead-letter-sink"),
    compacted=("topics.ltv_models", "topics.customer_ltv"),
    group_suffix="-ltv",
    state="each customer's order history and the model in force")

@dataclass(frozen=True)
class Load:
    """A topic the warehouse keeps (`seedance load`, the demo): the topic (a job config
    attribute), the sink of pipelines/store/sinks.py that writes its messages, the tables
    that sink fills, how `seedance load` counts its messages, and the config attributes the
    sink takes after the warehouse."""

    topic: str
    sink: str
    tables: tuple[str, ...]
    what: str
    options: tuple[str, ...] = ()


# topic -> sink -> tables: every topic the loader loads, in loading order
# (pipelines.store.loading.TopicLoader.load_all reads it)
LOADS: tuple[Load, ...] = (
    Load("topics.credits", "CreditsSink", ("attribution_credits",),
         "credit messages (tables of credit rows)"),
    Load("topics.conversions", "ConversionsSink", ("conversions",),
         "conversion messages (each order's revenue net of refunds)"),
    Load("gpu.costs_topic", "GpuCostsSink", ("gpu_call_costs", "gpu_idle_costs"),
         "GPU cost rows"),
    Load("topics.roi", "RoiSink", ("roi_daily", "roi_unallocated", "order_costs",
                                   "order_segments", "roi_days_closed"), "ROI rows"),
    # not a job's: `seedance spend publish` writes it, the ROI job reads it
    Load("topics.ad_spend", "SpendSink", ("ad_spend",), "spend records",
         options=("roi.currency",)),
    # either experiments topic: the sink tells exposures from conversions by their fields
    Load("topics.experiment_exposures", "ExperimentsSink",
         ("experiment_exposures", "experiment_conversions"), "experiment rows"),
    Load("topics.experiment_conversions", "ExperimentsSink",
         ("experiment_exposures", "experiment_conversions"), "experiment rows"),
    Load("topics.customer_ltv", "CustomerLtvSink", ("customer_ltv",), "customer LTV rows"),
)
# the topics jobs write that no table keeps: dead letters and late events (for people) and
# the run accounting (read by `seedance run`)
NOT_LOADED = ("topics.dead_letter", "topics.late", "topics.accounting",
              "gpu.metrics_dead_letter", "topics.roi_dead_letter", "topics.ltv_dead_letter")

# in the order commands list them and the demo runs them (each after the jobs it reads from)
STREAMING_JOBS: dict[str, StreamingJob] = {
    job.name: job for job in (ATTRIBUTION, GPU_COST, ROI, EXPERIMENTS, LTV)}
DEFAULT_JOB = ATTRIBUTION.name


__all__ = ["ATTRIBUTION", "COMPACTED", "DEFAULT_JOB", "EXPERIMENTS", "GPU_COST", "LOADS", "LTV",
           "NOT_LOADED", "ROI", "STREAMING_JOBS", "Load", "StreamingJob", "topic_settings",
           "unique"]
