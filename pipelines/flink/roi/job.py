"""The ROI job on PyFlink: credits + conversions + ad spend + GPU costs -> ROI per day.

ingest   the attribution job's `attribution_credits` and `conversions` topics and the GPU
         cost job's `gpu_costs` (all read_committed), and `ad_spend` records; each source
         with its own event-time watermarks
share    (roi.compute_cost: fully_loaded) keyed by GPU and UTC day: the GPU-day's idle cost
         shared over its calls by their cost, each share a cost of the call's trace
         (pipelines/flink/roi/compute.py ShareIdleCost)
link     keyed by trace id: the GPU cost of a trace goes to the conversion whose journey
         carried it (the `conversions` rows list their traces); cost no conversion claims
         within `roi.link_window_days` is reported as unlinked compute of its day, and moved
         should the claim come later (LinkTraceCosts)
segment  (allocation by ltv_segment) keyed by user: each order's LTV segment (SegmentOrders)
roi      keyed by UTC day: when the watermark passes the end of the day, `udfs.roi.day.day_roi`
         splits each campaign's spend by credit x stage (or segment) weight and each
         order's compute by credit, per model, and sums ROI by channel, campaign and
         stage; any input for a day already reported (restated spend, late credits, a
         moved cost) reports it again, so a day's last report covers all of its input
write    one JSON row per (model, day, dimension, key), per unallocated cost and per order (its
         revenue and allocated cost under experiments.cost_model) to `roi_daily`
         (read it as a changelog: the latest row per key wins; each record keyed by its row's
         key, so one key's versions stay in order in one partition); a day_closed row per
         part of a day it has closed (pipelines/flink/roi/rows.py); unusable inputs to the
         dead-letter topic with the reason; all exactly-once
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyflink.common import Duration, JobExecutionResult, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    KeyedProcessFunction,
    ProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import credit_messages, gpu_cost_messages, roi_messages, table_messages
from pipelines.codec.dead_letters import dead_letter
from pipelines.codec.frame import unframe
from pipelines.flink.jobs import ROI
from pipelines.flink.roi.compute import LinkTraceCosts, ShareIdleCost
from pipelines.flink.roi.rows import closed_rows, keyed_row, schedule_close
from pipelines.flink.roi.segments import ORDER_HISTORY, order_items, segmented
from pipelines.flink.roi.support import (
    DEAD_LETTERS,
    Item,
    ItemKind,
    ending,
    retired_letter,
    schedule_report,
)
from pipelines.flink.runtime.kafka import (
    PLACE_ONLY,
    build_sink,
    build_source,
    run_pipeline,
    stay_active,
)
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.ad_spend import SpendError, parse_message
from schemas import rows
from udfs.lifecycle import StageWeights
from udfs.ltv import SegmentWeights
from udfs.periods import DAY_MS, day_end_ms, day_of
from udfs.ratios import GROSS_MARGIN, MIN_COST
from udfs.roi import COMPUTE_COLUMNS, CREDIT_COLUMNS, SPEND_COLUMNS, day_roi, with_withdrawn


class UnusableInput(ValueError):
    """An input record the job cannot use, said plainly (its dead letter's reason)."""


class DecodeInputs(ProcessFunction):  # type: ignore[misc]
    """One message of one input topic -> items; unusable messages -> dead letters."""

    def __init__(self, kind: str, topic: str, currency: str,
                 fully_loaded: bool = False, orders: bool = False) -> None:
        self.kind = kind
        self.topic = topic
        self.currency = currency
        # GPU rows also go to the GPU-day's idle sharing (every call, and the idle rows)
        self.fully_loaded = fully_loaded
        # conversions also go to the LTV segments (ORDER_HISTORY, pipelines/flink/
        # segment_orders.py) when costs are shared by them
        self.orders = orders

    def process_element(self, record: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        partition = offset = None
        value: bytes | None = record
        try:
            framed = unframe(record)  # the record's place, for its dead letter
            partition, offset, value = framed.partition, framed.offset, framed.value
            if not value:
                raise UnusableInput("empty message (no value)")
            yield from self._items(value)
        except (SpendError, UnusableInput) as error:
            yield DEAD_LETTERS, dead_letter(self.topic, "unusable_input", str(error), value,
                                            partition, offset)
        except Exception as error:  # noqa: BLE001 - one record must never stop the job
            yield DEAD_LETTERS, dead_letter(self.topic, "unreadable_message", "unreadable "
                                            f"row: {error!r}", value, partition, offset)

    def _items(self, value: bytes) -> Iterator[Item]:
        if self.kind == "spend":
            spend = parse_message(value)
            if spend.currency != self.currency:
                raise SpendError(f"currency {spend.currency} is not the reporting currency "
                                 f"{self.currency} (convert before sending)")
            yield (ItemKind.SPEND, spend.day, spend.day_start_ms,
                   (spend.platform, spend.account, spend.campaign, spend.amount))
            return
        if self.kind == "credit":
            # a conversion's rows under one model, together: they replace what it had
            # (pipelines/codec/credit_messages.py)
            for (model, order), group in credit_messages.conversion_groups(value).items():
                ts = int(group[0]["conversion_ts_ms"])
                yield ItemKind.CREDIT, day_of(ts), ts, (model, order, [
                    (model, order, int(row["touch_index"]), row["channel"], row["campaign"],
                     row.get("stage", "unknown"), float(row["credit"]), float(row["revenue"]))
                    for row in group])
            return
        if self.kind == "conversion":  # a table of orders (pipelines/codec/table_messages.py)
            rows = table_messages.decode(value)
            orders = order_items(rows) if self.orders else []  # all read, or none taken
            for row in rows:
                ts = int(row["conversion_ts_ms"])
                for trace in row["trace_ids"]:
                    yield ItemKind.TRACE_CLAIM, trace, ts, (row["order_id"], day_of(ts))
            for item in orders:
                yield ORDER_HISTORY, item
            return
        if self.kind != "gpu":
            return
        message = gpu_cost_messages.decode(value)  # pipelines/codec/gpu_cost_messages.py
        if message.kind not in (gpu_cost_messages.CALL, gpu_cost_messages.IDLE):
            return
        row = message.values
        ts = int(row["interval_end_ms"])
        cost = float(row["cost_usd"])
        if not math.isfinite(cost):
            raise ValueError(f"cost_usd is not a number: {row['cost_usd']!r}")
        gpu_day = f"{row.get('gpu_uuid') or ''}\t{day_of(ts)}"
        if message.kind == gpu_cost_messages.IDLE:
            if self.fully_loaded:
                yield ItemKind.IDLE_TO_SHARE, gpu_day, ts, cost
            return
        trace = row.get("trace_id") or ""
        if trace:
            yield ItemKind.TRACE_COST, trace, ts, cost
        else:
            yield ItemKind.UNLINKED, day_of(ts), ts, cost
        if self.fully_loaded:
            yield ItemKind.GPU_CALL_COST, gpu_day, ts, (trace, cost)


class ItemTime(TimestampAssigner):  # type: ignore[misc]
    def extract_timestamp(self, value: Item, record_timestamp: int) -> int:
        return value[2]


class RoiPerDay(KeyedProcessFunction):  # type: ignore[misc]
    """Per UTC day: its credits, spend, linked and unlinked compute; reported when the
    watermark passes the day, and again after any later input for it, whatever the
    watermark: a day's last report is always computed from all of its input.

    Input behind the watermark (a partition read late, a restated spend, a moved cost) is
    reported at the next watermark; where the watermark has already reached its end (a
    drained stop), at once (roi_support.schedule_report). With `retention_ms` a
    day's state is dropped that long after the day ends (event time); input that comes
    after is not folded into a partial day but dead-lettered with the reason, so no report
    silently loses what came before. None (a bounded run): kept for the run."""

    def __init__(self, models: tuple[str, ...], weights: StageWeights,
                 retention_ms: int | None, currency: str, order_cost_model: str = "",
                 source: str = "roi", min_cost: float = MIN_COST,
                 gross_margin: float = GROSS_MARGIN,
                 segment_weights: SegmentWeights | None = None,
                 link_window_ms: int = 0) -> None:
        self.models, self.link_window_ms = models, link_window_ms  # 0: no closed days
        self.segment_weights = segment_weights  # costs shared by the orders' LTV segments
        self.min_cost = min_cost
        self.gross_margin = gross_margin
        self.weights = weights
        self.retention_ms = retention_ms
        self.currency = currency
        # each order's revenue and allocated cost under this model (the experiments'), as
        # kind=order_cost rows; '' for none
        self.order_cost_model = order_cost_model
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        # per (model, order): its credit rows, replaced whole by a later version
        self.credit_groups = runtime_context.get_map_state(
            MapStateDescriptor("credit-groups", Types.STRING(), pickled))
        # as versions before corrections kept them: every row, appended (read, not added to)
        self.credits = runtime_context.get_list_state(ListStateDescriptor("credits", pickled))
        self.compute = runtime_context.get_list_state(ListStateDescriptor("compute", pickled))
        self.unlinked = runtime_context.get_state(ValueStateDescriptor("unlinked", pickled))
        self.spend = runtime_context.get_map_state(
            MapStateDescriptor("spend", Types.STRING(), pickled))
        self.reported = runtime_context.get_state(ValueStateDescriptor("reported", pickled))
        # the (model, dimension, key) of the day's last roi rows
        self.reported_roi = runtime_context.get_state(
            ValueStateDescriptor("reported-roi", pickled))
        self.retired = runtime_context.get_state(ValueStateDescriptor("retired", pickled))
        # the day's orders' LTV segments (segment_orders.py), when costs are shared by them
        self.segments = runtime_context.get_map_state(
            MapStateDescriptor("order-segments", Types.STRING(), pickled))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        kind, day, _, payload = item
        if self.retired.value():
            yield DEAD_LETTERS, retired_letter(self.source, kind, day, payload)
            return
        if kind == ItemKind.CREDIT:
            model, order, credits = payload
            self.credit_groups.put(f"{model}\t{order}", credits)
        elif kind == ItemKind.ORDER_COMPUTE:
            self.compute.add(payload)
        elif kind in (ItemKind.UNLINKED, ItemKind.UNSHARED_IDLE):
            # by key: '' outside journeys, or the GPU whose idle no call shared
            key, amount = ("", payload) if kind == ItemKind.UNLINKED else payload
            unlinked = _by_key(self.unlinked.value())
            unlinked[key] = unlinked.get(key, 0.0) + amount
            self.unlinked.update(unlinked)
        elif kind == ItemKind.SPEND:
            platform, account, campaign, amount = payload
            self.spend.put(f"{platform}\t{account}\t{campaign}", amount)  # restated: replaced
        elif kind == ItemKind.ORDER_SEGMENT:  # (order, segment, value, user)
            self.segments.put(payload[0], payload[1:])
        schedule_close(ctx.timer_service(), day, self.link_window_ms)
        if schedule_report(ctx.timer_service(), day_end_ms(day), self.retention_ms):
            yield from self._report(day)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        day = ctx.get_current_key()
        retiring = self.retention_ms is not None \
            and timestamp >= day_end_ms(day) + self.retention_ms
        if not retiring:
            yield from self._report(day)
        # a day's marker follows its latest report (a link window as long as the retention
        # closes the day's compute as it retires)
        yield from closed_rows(ctx.timer_service(), day, timestamp, self.link_window_ms,
                               self.retention_ms is None)
        if retiring and not ending(ctx.timer_service()):
            for state in (self.credits, self.credit_groups, self.compute, self.unlinked,
                          self.spend, self.reported, self.reported_roi, self.segments):
                state.clear()
            self.retired.update(True)

    def _report(self, day: str) -> Iterator[str]:
        groups = dict(self.credit_groups.items())
        credits = pd.DataFrame(
            [*(row for row in self.credits.get() or []  # older rows, unless replaced
               if f"{row[0]}\t{row[1]}" not in groups),
             *(row for rows in groups.values() for row in rows)],
            columns=CREDIT_COLUMNS)
        spend = pd.DataFrame([(*key.split("\t"), amount) for key, amount in self.spend.items()],
                             columns=SPEND_COLUMNS)
        compute = pd.DataFrame(list(self.compute.get() or []), columns=COMPUTE_COLUMNS)
        scored = dict(self.segments.items()) if self.segment_weights is not None else {}
        segments = {order: score[0] for order, score in scored.items()} \
            if self.segment_weights is not None else None
        result = day_roi(credits, spend, compute, self.models, self.weights,
                         _by_key(self.unlinked.value()), self.min_cost, self.gross_margin,
                         self.segment_weights, segments)
        roi_keys = []
        for row in result.roi.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency}
            for ratio in ("roi", "roas", "margin_roi"):  # NaN: under the cost floor
                values[ratio] = None if math.isnan(values[ratio]) else values[ratio]
            roi_keys.append((values["model"], values["dimension"], values["key"]))
            yield keyed_row(roi_messages.ROI, values)
        # a channel, campaign or stage reported before but without credit now (a corrected
        # conversion moved it): withdrawn, so the changelog's latest row is not stale
        stored = self.reported_roi.value() or []
        for model, dimension, key in sorted(set(map(tuple, stored)) - set(roi_keys)):
            yield keyed_row(roi_messages.ROI, {
                **dict.fromkeys(rows.ROI_DAILY.names, None), "model": model, "day": day,
                "dimension": dimension, "key": key, "conversions": 0.0, "revenue": 0.0,
                "ad_spend": 0.0, "compute_cost": 0.0, "currency": self.currency},
                withdrawn=True)
        self.reported_roi.update(sorted(set(roi_keys)))
        left = [(row.model, row.kind, row.key, float(row.amount))
                for row in result.unallocated.itertuples(index=False)]
        # the topic is read as "latest row per key": a key reported before but gone now
        # (its spend found a conversion after all) is reported again with amount 0
        for model, kind, key, amount in with_withdrawn(self.reported.value(), left):
            values = {"model": model, "day": day, "cost_kind": kind, "key": key,
                      "amount": amount, "currency": self.currency}
            yield keyed_row(roi_messages.UNALLOCATED, values)
        self.reported.update(sorted({row[:3] for row in left}))
        for order, (segment, value, user) in sorted(scored.items()):
            yield keyed_row(roi_messages.ORDER_SEGMENT, {
                "day": day, "order_id": order, "user_id": user, "predicted_ltv": value,
                "segment": segment})
        orders = result.orders[result.orders.model == self.order_cost_model]
        for row in orders.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency}
            yield keyed_row(roi_messages.ORDER_COST, values)


def _by_key(unlinked: Any) -> dict[str, float]:
    """The day's compute no order took, by key (a plain number from before keys)."""
    if isinstance(unlinked, dict):
        return dict(unlinked)
    return {"": float(unlinked)} if unlinked else {}


def build_roi_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                       bootstrap: str) -> None:
    topics, roi = config.topics, config.roi
    settings = config.computation
    segmenter = settings.segmenter if settings.by_segment is not None else None
    # credits arrive up to a refit period behind event time, GPU costs an emit period
    slack_ms = int(config.event_time.max_out_of_orderness_s * 1000) \
        + max(settings.credit_lag_ms, int(config.gpu.emit_every_s * 1000))
    # a bounded run ends every input with the final watermark: no input is declared idle
    # (an idle input's data would be behind the others' watermark) and no state retired
    bounded = config.input.bounded
    idle = Duration.of_millis(int(config.event_time.idleness_s * 1000))
    retention_ms = None if bounded else int(roi.retention_days * DAY_MS)
    inputs = [("credit", topics.credits), ("conversion", topics.conversions),
              ("gpu", config.gpu.costs_topic), ("spend", topics.ad_spend)]
    timed = []
    decoded_streams = []
    for kind, topic in inputs:
        # framed with each record's partition and offset (no event time: the items carry
        # theirs), so that a dead letter says where its input is
        raw = env.from_source(build_source(config, bootstrap, topic, "-roi",
                                           framed_max_future_ms=0, signal=PLACE_ONLY),
                              WatermarkStrategy.no_watermarks(), f"{kind}-source") \
            .uid(f"roi-source-{kind}")
        decoded = raw.process(DecodeInputs(kind, topic, settings.currency,
                                           settings.fully_loaded, segmenter is not None)) \
            .name(f"decode-{kind}").uid(f"roi-decode-{kind}")
        decoded_streams.append(decoded)
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(slack_ms))
        if not bounded:
            strategy = strategy.with_idleness(idle)
        strategy = strategy.with_timestamp_assigner(ItemTime())
        timed.append(decoded.assign_timestamps_and_watermarks(strategy)
                     .name(f"{kind}-time").uid(f"roi-time-{kind}"))
        if kind == "conversion" and segmenter is not None:  # each order's LTV segment
            segments = stay_active(segmented(
                decoded.get_side_output(ORDER_HISTORY).assign_timestamps_and_watermarks(
                    strategy).name("order-time").uid("roi-time-orders"), segmenter)
                .uid("roi-segment-orders"), "segment-orders-stay-active",
                "roi-segment-orders-stay-active")
    credits, claims, costs, spend = timed
    if segmenter is not None:  # on to the order's day
        spend = spend.union(segments)
    if settings.fully_loaded:  # each GPU-day's idle cost shared over its calls first
        shared = (costs.key_by(lambda item: item[1], key_type=Types.STRING())
                  .process(ShareIdleCost(retention_ms, topics.roi))
                  .name("share-idle-cost").uid("roi-share-idle-cost"))
        # behind a key-by: the operators fed wait for its watermark (no idle announcement
        # lets the watermark pass what it emits; io.seedance.flink.StayActive)
        costs = stay_active(shared, "share-idle-cost-stay-active",
                            "roi-share-idle-cost-stay-active")
    linked = stay_active(claims.union(costs)
                         .key_by(lambda item: item[1], key_type=Types.STRING())
                         .process(LinkTraceCosts(settings.link_window_ms, retention_ms))
                         .name("link-trace-costs").uid("roi-link-trace-costs"),
                         "link-trace-costs-stay-active", "roi-link-trace-costs-stay-active")
    rows = (credits.union(spend, linked)
            .key_by(lambda item: item[1], key_type=Types.STRING())
            .process(RoiPerDay(settings.models, settings.stage_weights, retention_ms,
                               settings.currency, config.experiment_cost_model, topics.roi,
                               settings.min_cost, settings.gross_margin,
                               settings.by_segment, settings.link_window_ms),
                     output_type=Types.STRING())
            .name("roi-per-day").uid("roi-per-day"))
    rows.sink_to(build_sink(config, bootstrap, topics.roi, "roi", keyed=True)) \
        .name("roi-sink").uid("roi-sink")
    dead = rows.get_side_output(DEAD_LETTERS)
    if settings.fully_loaded:
        dead = dead.union(shared.get_side_output(DEAD_LETTERS))
    for stream in decoded_streams:
        dead = dead.union(stream.get_side_output(DEAD_LETTERS))
    dead.sink_to(build_sink(config, bootstrap, topics.roi_dead_letter, "roi")) \
        .name("roi-dead-letter-sink").uid("roi-dead-letter-sink")


def run_roi_job(config: StreamingJobConfig, bootstrap: str, job_name: str = ROI.flink_name,
                env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_roi_pipeline, config, bootstrap, job_name, env)
