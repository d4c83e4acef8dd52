"""The ROI job on PyFlink: credits + conversions + ad spend + GPU costs -> ROI per day.

ingest   the attribution job's `attribution_credits` and `conversions` topics and the GPU
         cost job's `gpu_costs` (all read_committed), and `ad_spend` records; each source
         with its own event-time watermarks
link     keyed by trace id: the GPU cost of a trace goes to the conversion whose journey
         carried it (the `conversions` rows list their traces); cost no conversion claims
         within `roi.link_window_days` is reported as unlinked compute of its day
roi      keyed by UTC day: when the watermark passes the end of the day, `udfs.roi.day_roi`
         splits each campaign's spend by credit x stage weight and each order's compute by
         credit, per model, and sums ROI by channel, campaign and stage; input that arrives
         for a day already reported (restated spend, late credits) reports it again
write    one JSON row per (model, day, dimension, key), per unallocated cost and per order (its
         revenue and allocated cost under experiments.cost_model) to `roi_daily`
         (read it as a changelog: the latest row per key wins); unusable inputs to the
         dead-letter topic with the reason; all exactly-once
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from pyflink.common import Duration, JobExecutionResult, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import credit_messages, table_messages
from pipelines.flink.kafka import build_sink, build_source, run_pipeline
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.ad_spend import SpendError, parse_message
from schemas import rows
from udfs.lifecycle import StageWeights
from udfs.roi import COMPUTE_COLUMNS, CREDIT_COLUMNS, SPEND_COLUMNS, day_roi, with_withdrawn

DAY_MS = 86_400_000
DEAD_LETTERS = OutputTag("roi-dead-letters", Types.STRING())

# Records between the operators: (kind, key, timestamp_ms, payload)
#   credit  day       conv ts    (model, order, touch, channel, campaign, stage, credit, revenue)
#   claim   trace id  conv ts    (order_id, day)
#   cost    trace id  interval   cost_usd
#   spend   day       day start  (platform, account, campaign, amount)
#   compute day       conv ts    (order_id, cost)       (from the link step)
#   unlinked day      interval   cost_usd               (from the link step)
Item = tuple[str, str, int, Any]


def day_of(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d")


def day_end_ms(day: str) -> int:
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return int(start.timestamp() * 1000) + DAY_MS - 1


def _dead_letter(source: str, reason: str, value: bytes) -> str:
    return json.dumps({"source": source, "reason": reason,
                       "payload": value.decode("utf-8", "replace")}, separators=(",", ":"))


class DecodeInputs(ProcessFunction):  # type: ignore[misc]
    """One message of one input topic -> items; unusable messages -> dead letters."""

    def __init__(self, kind: str, topic: str, currency: str) -> None:
        self.kind = kind
        self.topic = topic
        self.currency = currency

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        try:
            yield from self._items(value)
        except SpendError as error:
            yield DEAD_LETTERS, _dead_letter(self.topic, str(error), value)
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            yield DEAD_LETTERS, _dead_letter(self.topic, f"unreadable row: {error!r}", value)

    def _items(self, value: bytes) -> Iterator[Item]:
        if self.kind == "spend":
            spend = parse_message(value)
            if spend.currency != self.currency:
                raise SpendError(f"currency {spend.currency} is not the reporting currency "
                                 f"{self.currency} (convert before sending)")
            yield ("spend", spend.day, spend.day_start_ms,
                   (spend.platform, spend.account, spend.campaign, spend.amount))
            return
        if self.kind == "credit":
            for row in credit_messages.decode(value):
                ts = int(row["conversion_ts_ms"])
                yield ("credit", day_of(ts), ts,
                       (row["model"], row["order_id"], int(row["touch_index"]),
                        row["channel"], row["campaign"], row.get("stage", "unknown"),
                        float(row["credit"]), float(row["revenue"])))
            return
        if self.kind == "conversion":  # a table of orders (pipelines/codec/table_messages.py)
            for row in table_messages.decode(value):
                ts = int(row["conversion_ts_ms"])
                for trace in row["trace_ids"]:
                    yield "claim", trace, ts, (row["order_id"], day_of(ts))
            return
        row = json.loads(value)
        if self.kind == "gpu" and row.get("kind") == "call":
            ts = int(row["interval_end_ms"])
            cost = float(row["cost_usd"])
            if not math.isfinite(cost):
                raise ValueError(f"cost_usd is not a number: {row['cost_usd']!r}")
            if row.get("trace_id"):
                yield "cost", row["trace_id"], ts, cost
            else:
                yield "unlinked", day_of(ts), ts, cost


class ItemTime(TimestampAssigner):  # type: ignore[misc]
    def extract_timestamp(self, value: Item, record_timestamp: int) -> int:
        return value[2]


class LinkTraceCosts(KeyedProcessFunction):  # type: ignore[misc]
    """Per trace: its GPU cost waits for the conversion whose journey carries the trace.

    A touch belongs to at most one converting journey, so a trace has one claim; should a
    second conversion name it, the first keeps it."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.claim = runtime_context.get_state(
            ValueStateDescriptor("claim", Types.PICKLED_BYTE_ARRAY()))
        self.costs = runtime_context.get_list_state(
            ListStateDescriptor("costs", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Item]:
        kind, _, ts, payload = item
        if kind == "unlinked":  # a GPU call outside any trace: nothing to wait for
            yield item
            return
        claim = self.claim.value()
        timers = ctx.timer_service()
        if kind == "claim":
            if claim is not None:
                return
            order_id, day = payload
            self.claim.update((order_id, day, ts))
            for _, cost in self.costs.get() or []:
                yield "compute", day, ts, (order_id, cost)
            self.costs.clear()
            timers.register_event_time_timer(ts + self.window_ms)
        elif claim is not None:
            order_id, day, claim_ts = claim
            yield "compute", day, claim_ts, (order_id, payload)
        else:
            self.costs.add((ts, payload))
            timers.register_event_time_timer(ts + self.window_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Item]:
        waiting = list(self.costs.get() or [])
        expired = [(ts, cost) for ts, cost in waiting if ts + self.window_ms <= timestamp]
        for ts, cost in expired:
            yield "unlinked", day_of(ts), ts, cost
        if expired:
            self.costs.update([w for w in waiting if w[0] + self.window_ms > timestamp])
        claim = self.claim.value()
        if claim is not None and claim[2] + self.window_ms <= timestamp:
            self.claim.clear()


class RoiPerDay(KeyedProcessFunction):  # type: ignore[misc]
    """Per UTC day: its credits, spend, linked and unlinked compute; reported when the
    watermark passes the day, and again whenever input for it arrives later."""

    def __init__(self, models: tuple[str, ...], weights: StageWeights,
                 retention_ms: int, currency: str, order_cost_model: str = "") -> None:
        self.models = models
        self.weights = weights
        self.retention_ms = retention_ms
        self.currency = currency
        # each order's revenue and allocated cost under this model (the experiments'), as
        # kind=order_cost rows; '' for none
        self.order_cost_model = order_cost_model

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.credits = runtime_context.get_list_state(ListStateDescriptor("credits", pickled))
        self.compute = runtime_context.get_list_state(ListStateDescriptor("compute", pickled))
        self.unlinked = runtime_context.get_state(ValueStateDescriptor("unlinked", pickled))
        self.spend = runtime_context.get_map_state(
            MapStateDescriptor("spend", Types.STRING(), pickled))
        self.reported = runtime_context.get_state(ValueStateDescriptor("reported", pickled))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> None:
        kind, day, _, payload = item
        if kind == "credit":
            self.credits.add(payload)
        elif kind == "compute":
            self.compute.add(payload)
        elif kind == "unlinked":
            self.unlinked.update((self.unlinked.value() or 0.0) + payload)
        elif kind == "spend":
            platform, account, campaign, amount = payload
            self.spend.put(f"{platform}\t{account}\t{campaign}", amount)  # restated: replaced
        end = day_end_ms(day)
        timers = ctx.timer_service()
        if self.reported.value() is not None:
            # a day already reported: report it again once the watermark moves on
            watermark = timers.current_watermark()
            if watermark < 2**63 - 2:
                timers.register_event_time_timer(max(end, watermark + 1))
        else:
            timers.register_event_time_timer(end)
            timers.register_event_time_timer(end + self.retention_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        day = ctx.get_current_key()
        if timestamp >= day_end_ms(day) + self.retention_ms:
            for state in (self.credits, self.compute, self.unlinked, self.spend, self.reported):
                state.clear()
            return
        credits = pd.DataFrame(list(self.credits.get() or []), columns=CREDIT_COLUMNS)
        spend = pd.DataFrame([(*key.split("\t"), amount) for key, amount in self.spend.items()],
                             columns=SPEND_COLUMNS)
        compute = pd.DataFrame(list(self.compute.get() or []), columns=COMPUTE_COLUMNS)
        result = day_roi(credits, spend, compute, self.models, self.weights,
                         self.unlinked.value() or 0.0)
        for row in result.roi.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency,
                      "roi": None if math.isnan(row.roi) else row.roi}
            yield json.dumps({"kind": "roi", **{name: values[name]
                                                for name in rows.ROI_DAILY.names}},
                             separators=(",", ":"))
        left = [(row.model, row.kind, row.key, float(row.amount))
                for row in result.unallocated.itertuples(index=False)]
        # the topic is read as "latest row per key": a key reported before but gone now
        # (its spend found a conversion after all) is reported again with amount 0
        for model, kind, key, amount in with_withdrawn(self.reported.value(), left):
            values = {"model": model, "day": day, "cost_kind": kind, "key": key,
                      "amount": amount, "currency": self.currency}
            yield json.dumps({"kind": "unallocated", **{name: values[name] for name in
                                                        rows.ROI_UNALLOCATED.names}},
                             separators=(",", ":"))
        self.reported.update(sorted({row[:3] for row in left}))
        orders = result.orders[result.orders.model == self.order_cost_model]
        for row in orders.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency}
            yield json.dumps({"kind": "order_cost", **{name: values[name] for name in
                                                       rows.ORDER_COST.names}},
                             separators=(",", ":"))


def build_roi_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                       bootstrap: str) -> None:
    topics, roi = config.topics, config.roi
    settings = config.computation
    # credits arrive up to a refit period behind event time, GPU costs an emit period
    slack_ms = int(config.event_time.max_out_of_orderness_s * 1000) \
        + max(settings.credit_lag_ms, int(config.gpu.emit_every_s * 1000))
    idle = Duration.of_millis(int(config.event_time.idleness_s * 1000))
    inputs = [("credit", topics.credits), ("conversion", topics.conversions),
              ("gpu", config.gpu.costs_topic), ("spend", topics.ad_spend)]
    timed = []
    decoded_streams = []
    for kind, topic in inputs:
        raw = env.from_source(build_source(config, bootstrap, topic, "-roi"),
                              WatermarkStrategy.no_watermarks(), f"{kind}-source") \
            .uid(f"roi-source-{kind}")
        decoded = raw.process(DecodeInputs(kind, topic, settings.currency)) \
            .name(f"decode-{kind}").uid(f"roi-decode-{kind}")
        decoded_streams.append(decoded)
        timed.append(decoded.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(slack_ms))
            .with_idleness(idle).with_timestamp_assigner(ItemTime()))
            .name(f"{kind}-time").uid(f"roi-time-{kind}"))
    credits, claims, costs, spend = timed
    linked = (claims.union(costs)
              .key_by(lambda item: item[1], key_type=Types.STRING())
              .process(LinkTraceCosts(settings.link_window_ms))
              .name("link-trace-costs").uid("roi-link-trace-costs"))
    rows = (credits.union(spend, linked)
            .key_by(lambda item: item[1], key_type=Types.STRING())
            .process(RoiPerDay(settings.models, settings.stage_weights,
                               int(roi.retention_days * DAY_MS), settings.currency,
                               config.experiment_cost_model),
                     output_type=Types.STRING())
            .name("roi-per-day").uid("roi-per-day"))
    rows.sink_to(build_sink(config, bootstrap, topics.roi, "roi")) \
        .name("roi-sink").uid("roi-sink")
    dead = decoded_streams[0].get_side_output(DEAD_LETTERS)
    for stream in decoded_streams[1:]:
        dead = dead.union(stream.get_side_output(DEAD_LETTERS))
    dead.sink_to(build_sink(config, bootstrap, topics.roi_dead_letter, "roi")) \
        .name("roi-dead-letter-sink").uid("roi-dead-letter-sink")


def run_roi_job(config: StreamingJobConfig, bootstrap: str, job_name: str = "seedance-roi",
                env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_roi_pipeline, config, bootstrap, job_name, env)
