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
    TimeDomain,
)
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import credit_messages, table_messages
from pipelines.flink.kafka import build_sink, build_source, keyed_line, run_pipeline
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.ad_spend import SpendError, parse_message
from schemas import rows
from schemas.row_layout import Row
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
    """Per trace: its GPU cost goes to the conversion whose journey carried the trace (its
    claim) when the two lie within the link window, and otherwise counts as unlinked
    compute of the cost's own day: the rule of `pipelines.backfill.roi.link_costs`, whatever
    the order in which costs and claims arrive.

    A cost waits for its claim until the watermark passes the window; a claim that comes
    after that (its topic read later, a partition behind) still takes it: the cost is moved,
    a negative unlinked item taking back what was reported, so the days converge to the same
    sums. Should a second conversion name the trace, the earlier one keeps it (as the
    backfill's earliest claim). State is kept `retention_ms` past the window (None: for
    the life of the job, as a bounded run does)."""

    def __init__(self, window_ms: int, retention_ms: int | None = None) -> None:
        self.window_ms = window_ms
        self.retention_ms = retention_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        # (order_id, day, conversion ts): the earliest claim seen
        self.claim = runtime_context.get_state(ValueStateDescriptor("trace-claim", pickled))
        # [[ts, cost, placed]]: placed None (waiting), ("unlinked", day) or
        # ("order", order_id, day, conversion ts)
        self.costs = runtime_context.get_state(ValueStateDescriptor("trace-costs", pickled))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Item]:
        kind, _, ts, payload = item
        if kind == "unlinked":  # a GPU call outside any trace: nothing to wait for
            yield item
            return
        timers = ctx.timer_service()
        claim = self.claim.value()
        costs = self.costs.value() or []
        if kind == "claim":
            order_id, day = payload
            if claim is not None and (claim[2], claim[0]) <= (ts, order_id):
                return  # an earlier (or the same) conversion holds the trace already
            claim = (order_id, day, ts)
            self.claim.update(claim)
        else:
            costs.append([ts, payload, None])
            timers.register_event_time_timer(ts + self.window_ms)
        yield from self._place(costs, claim, timers.current_watermark())
        self.costs.update(costs)
        if self.retention_ms is not None:
            timers.register_event_time_timer(ts + self.window_ms + self.retention_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Item]:
        claim = self.claim.value()
        costs = self.costs.value() or []
        yield from self._place(costs, claim, timestamp)
        if self.retention_ms is not None:
            last = max([c[0] for c in costs] + ([claim[2]] if claim else []), default=0)
            if timestamp >= last + self.window_ms + self.retention_ms:
                self.claim.clear()
                self.costs.clear()
                return
        self.costs.update(costs)

    def _place(self, costs: list[list[Any]], claim: tuple[str, str, int] | None,
               watermark: int) -> Iterator[Item]:
        """Each cost where it belongs now; what moved is taken back where it was."""
        for entry in costs:
            ts, cost, placed = entry
            if claim is not None and abs(ts - claim[2]) < self.window_ms:
                target: tuple[Any, ...] | None = ("order", *claim)
            elif placed is not None or watermark >= ts + self.window_ms:
                target = ("unlinked", day_of(ts))
            else:
                target = None  # waits for a claim
            if target == placed:
                continue
            if placed is not None:
                yield _placed_item(placed, ts, -cost)
            if target is not None:
                yield _placed_item(target, ts, cost)
            entry[2] = target


def _placed_item(placed: tuple[Any, ...], ts: int, cost: float) -> Item:
    if placed[0] == "order":
        _, order_id, day, claim_ts = placed
        return "compute", day, claim_ts, (order_id, cost)
    return "unlinked", placed[1], ts, cost


MAX_WATERMARK = 2**63 - 1
REREPORT_DELAY_MS = 1_000


class RoiPerDay(KeyedProcessFunction):  # type: ignore[misc]
    """Per UTC day: its credits, spend, linked and unlinked compute; reported when the
    watermark passes the day, and again after any later input for it, whatever the
    watermark: a day's last report is always computed from all of its input.

    Input behind the watermark (a partition read late, a restated spend, a moved cost) is
    reported at the next watermark; where the watermark has already reached its end (a
    drained stop), after `REREPORT_DELAY_MS` of processing time. With `retention_ms` a
    day's state is dropped that long after the day ends (event time); input that comes
    after is not folded into a partial day but dead-lettered with the reason, so no report
    silently loses what came before. None (a bounded run): kept for the run."""

    def __init__(self, models: tuple[str, ...], weights: StageWeights,
                 retention_ms: int | None, currency: str, order_cost_model: str = "",
                 source: str = "roi") -> None:
        self.models = models
        self.weights = weights
        self.retention_ms = retention_ms
        self.currency = currency
        # each order's revenue and allocated cost under this model (the experiments'), as
        # kind=order_cost rows; '' for none
        self.order_cost_model = order_cost_model
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.credits = runtime_context.get_list_state(ListStateDescriptor("credits", pickled))
        self.compute = runtime_context.get_list_state(ListStateDescriptor("compute", pickled))
        self.unlinked = runtime_context.get_state(ValueStateDescriptor("unlinked", pickled))
        self.spend = runtime_context.get_map_state(
            MapStateDescriptor("spend", Types.STRING(), pickled))
        self.reported = runtime_context.get_state(ValueStateDescriptor("reported", pickled))
        self.retired = runtime_context.get_state(ValueStateDescriptor("retired", pickled))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        kind, day, _, payload = item
        if self.retired.value():
            yield DEAD_LETTERS, _dead_letter(
                self.source, f"{kind} input for {day} came after the day's state was retired "
                f"(roi.retention_days after the day): not folded into a partial day",
                json.dumps([kind, day, payload], default=str).encode())
            return
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
        watermark = timers.current_watermark()
        if watermark < end:
            timers.register_event_time_timer(end)
        elif watermark < MAX_WATERMARK - 1:  # past the day: report again at the next one
            timers.register_event_time_timer(watermark + 1)
        else:  # no watermark comes any more (drained, or every input finished)
            timers.register_processing_time_timer(timers.current_processing_time()
                                                  + REREPORT_DELAY_MS)
        if self.retention_ms is not None:
            timers.register_event_time_timer(end + self.retention_ms)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        day = ctx.get_current_key()
        if ctx.time_domain() == TimeDomain.EVENT_TIME and self.retention_ms is not None \
                and timestamp >= day_end_ms(day) + self.retention_ms:
            for state in (self.credits, self.compute, self.unlinked, self.spend, self.reported):
                state.clear()
            self.retired.update(True)
            return
        yield from self._report(day)

    def _report(self, day: str) -> Iterator[str]:
        credits = pd.DataFrame(list(self.credits.get() or []), columns=CREDIT_COLUMNS)
        spend = pd.DataFrame([(*key.split("\t"), amount) for key, amount in self.spend.items()],
                             columns=SPEND_COLUMNS)
        compute = pd.DataFrame(list(self.compute.get() or []), columns=COMPUTE_COLUMNS)
        result = day_roi(credits, spend, compute, self.models, self.weights,
                         self.unlinked.value() or 0.0)
        for row in result.roi.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency,
                      "roi": None if math.isnan(row.roi) else row.roi}
            yield _keyed_row("roi", rows.ROI_DAILY, values)
        left = [(row.model, row.kind, row.key, float(row.amount))
                for row in result.unallocated.itertuples(index=False)]
        # the topic is read as "latest row per key": a key reported before but gone now
        # (its spend found a conversion after all) is reported again with amount 0
        for model, kind, key, amount in with_withdrawn(self.reported.value(), left):
            values = {"model": model, "day": day, "cost_kind": kind, "key": key,
                      "amount": amount, "currency": self.currency}
            yield _keyed_row("unallocated", rows.ROI_UNALLOCATED, values)
        self.reported.update(sorted({row[:3] for row in left}))
        orders = result.orders[result.orders.model == self.order_cost_model]
        for row in orders.itertuples(index=False):
            values = {**row._asdict(), "day": day, "currency": self.currency}
            yield _keyed_row("order_cost", rows.ORDER_COST, values)


def _keyed_row(kind: str, row: Row, values: dict[str, Any]) -> str:
    """One result row for the keyed roi sink: its key (kind and the row's key columns) and
    its JSON, so every version of one row goes to one partition, in order."""
    return keyed_line((kind, *(values[name] for name in row.key)),
                      json.dumps({"kind": kind, **{name: values[name] for name in row.names}},
                                 separators=(",", ":")))


def build_roi_pipeline(env: StreamExecutionEnvironment, config: StreamingJobConfig,
                       bootstrap: str) -> None:
    topics, roi = config.topics, config.roi
    settings = config.computation
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
        raw = env.from_source(build_source(config, bootstrap, topic, "-roi"),
                              WatermarkStrategy.no_watermarks(), f"{kind}-source") \
            .uid(f"roi-source-{kind}")
        decoded = raw.process(DecodeInputs(kind, topic, settings.currency)) \
            .name(f"decode-{kind}").uid(f"roi-decode-{kind}")
        decoded_streams.append(decoded)
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(slack_ms))
        if not bounded:
            strategy = strategy.with_idleness(idle)
        timed.append(decoded.assign_timestamps_and_watermarks(
            strategy.with_timestamp_assigner(ItemTime()))
            .name(f"{kind}-time").uid(f"roi-time-{kind}"))
    credits, claims, costs, spend = timed
    linked = (claims.union(costs)
              .key_by(lambda item: item[1], key_type=Types.STRING())
              .process(LinkTraceCosts(settings.link_window_ms, retention_ms))
              .name("link-trace-costs").uid("roi-link-trace-costs"))
    rows = (credits.union(spend, linked)
            .key_by(lambda item: item[1], key_type=Types.STRING())
            .process(RoiPerDay(settings.models, settings.stage_weights, retention_ms,
                               settings.currency, config.experiment_cost_model, topics.roi),
                     output_type=Types.STRING())
            .name("roi-per-day").uid("roi-per-day"))
    rows.sink_to(build_sink(config, bootstrap, topics.roi, "roi", keyed=True)) \
        .name("roi-sink").uid("roi-sink")
    dead = rows.get_side_output(DEAD_LETTERS)
    for stream in decoded_streams:
        dead = dead.union(stream.get_side_output(DEAD_LETTERS))
    dead.sink_to(build_sink(config, bootstrap, topics.roi_dead_letter, "roi")) \
        .name("roi-dead-letter-sink").uid("roi-dead-letter-sink")


def run_roi_job(config: StreamingJobConfig, bootstrap: str, job_name: str = "seedance-roi",
                env: StreamExecutionEnvironment | None = None) -> JobExecutionResult:
    return run_pipeline(build_roi_pipeline, config, bootstrap, job_name, env)
