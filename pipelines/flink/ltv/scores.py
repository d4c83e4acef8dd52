"""The ltv job's operators: the conversions topic's messages as orders batched per user
bucket, the ltv_models topic's messages checked, and per bucket the customers' tallies in
keyed state, scored with the current model (a broadcast) when their orders come and when
the watermark closes a day.

The logic is udfs/ltv/tally.py's (tallies, summaries, scores, the close clock) and the
model message pipelines/codec/ltv_models.py's; these classes load state, call it and
store it. docs/ltv-stream.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import orjson
from pyflink.common import Types
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    KeyedBroadcastProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeContext,
)
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from pipelines.codec import table_messages
from pipelines.codec.dead_letters import dead_letter
from pipelines.codec.frame import unframe
from pipelines.codec.ltv_models import KEY, ModelMessage
from pipelines.flink.runtime.watermarks import MAX_WATERMARK
from udfs.journeys import bucket_of
from udfs.ltv import (
    CloseClock,
    Order,
    Orders,
    Tallies,
    customer_rows,
    day_number,
    summaries_at,
    summaries_of,
)
from udfs.periods import DAY_MS

DEAD_LETTERS = OutputTag("ltv-dead-letters", Types.STRING())
# the current model message (JSON, as ModelMessage.to_json wrote it) under ltv_models.KEY
MODELS = MapStateDescriptor("ltv-models", Types.STRING(), Types.STRING())
ROWS_TYPE = Types.PRIMITIVE_ARRAY(Types.BYTE())  # records of a keyed raw sink

# Between the operators: (bucket, newest conversion_ts_ms, orders of the bucket's users)
Batch = tuple[int, int, list[Order]]


def orders_by_bucket(rows: Iterable[dict[str, Any]], buckets: int) -> dict[int, list[Order]]:
    """The conversion rows (rows.CONVERSION) of users, as orders (order id, user, ts,
    revenue) by user bucket; an anonymous order has no customer to count for."""
    found: dict[int, list[Order]] = {}
    for row in rows:
        user = row["user_id"]
        if not user:
            continue
        revenue = float(row["revenue"])
        if not math.isfinite(revenue):
            raise ValueError(f"order {row['order_id']}: revenue is not a number: "
                             f"{row['revenue']!r}")
        found.setdefault(bucket_of(str(user), buckets), []).append(
            (str(row["order_id"]), str(user), int(row["conversion_ts_ms"]), revenue))
    return found


class DecodeOrders(ProcessFunction):  # type: ignore[misc]
    """A framed conversions message (a table of rows.CONVERSION rows) -> one batch per
    user bucket; a message that cannot be read is a dead letter with the reason."""

    def __init__(self, buckets: int, source: str) -> None:
        self.buckets = buckets
        self.source = source

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        record = unframe(value)
        try:
            if record.value is None:
                raise ValueError("empty message (no value)")
            by_bucket = orders_by_bucket(table_messages.decode(record.value), self.buckets)
        except Exception as error:  # noqa: BLE001 - one message must never stop the job
            yield DEAD_LETTERS, dead_letter(self.source, "unreadable_message",
                                            f"unreadable conversions message: {error!r}",
                                            record.value, record.partition, record.offset)
            return
        for bucket, orders in by_bucket.items():
            yield bucket, max(order[2] for order in orders), orders


class ParseModels(ProcessFunction):  # type: ignore[misc]
    """A framed ltv_models message -> the model message as JSON (ModelMessage.to_json), or
    a dead letter with the reason: a bad model never reaches the scoring, which keeps the
    one it had."""

    def __init__(self, source: str) -> None:
        self.source = source

    def process_element(self, value: bytes, ctx: ProcessFunction.Context) -> Iterator[Any]:
        record = unframe(value)
        try:
            if record.value is None:
                raise ValueError("empty message (no value): the current model stays")
            yield ModelMessage.from_json(record.value).to_json()
        except Exception as error:  # noqa: BLE001 - one message must never stop the job
            yield DEAD_LETTERS, dead_letter(self.source, "invalid_ltv_model",
                                            f"not an LTV model: {error}", record.value,
                                            record.partition, record.offset)


class BatchTime(TimestampAssigner):  # type: ignore[misc]
    def extract_timestamp(self, value: Batch, record_timestamp: int) -> int:
        return value[1]


class NeverBehind(TimestampAssigner):  # type: ignore[misc]
    """The models' time: the end of time, so that the broadcast input's watermark never
    holds back the conversions' (a two-input operator's watermark is the lower one)."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return MAX_WATERMARK - 1


class ScoreCustomers(KeyedBroadcastProcessFunction):  # type: ignore[misc]
    """Per user bucket: each user's orders (MapState user -> its tally, udfs.ltv.tally
    Orders), the last day the bucket was scored as of and the days with orders waiting
    for the watermark (the CloseClock). With a model, the users of a batch are scored as of
    their latest order's day (not before the last close) and, when the watermark passes
    the end of a day with orders, every user of the bucket as of that day (the latest such
    day, if it passed several). Without one, the tallies are kept and nothing is emitted.
    Each row is a customer_ltv record keyed by its user; customers the model gives no
    finite value are a dead letter (the job goes on). The tallies are also kept in memory
    per bucket, read from state once per bucket after a (re)start."""

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.orders = runtime_context.get_map_state(
            MapStateDescriptor("orders", Types.STRING(), pickled))
        self.clock_state = runtime_context.get_state(ValueStateDescriptor("clock", pickled))
        self.tallies: dict[int, Tallies] = {}
        self.parsed: tuple[str, ModelMessage] | None = None

    def process_element(self, batch: Batch, ctx: Any) -> Iterator[Any]:
        bucket, _, orders = batch
        tallies = self._tallies(bucket)
        changed = tallies.add(orders)
        for user in changed:
            if user in tallies.users:
                self.orders.put(user, tallies.users[user])
            else:
                self.orders.remove(user)
        clock = CloseClock(*(self.clock_state.value() or (None, ())))
        timers = ctx.timer_service()
        watermark = timers.current_watermark()
        new = clock.note(day_number(order[2]) for order in orders)
        message = self._model(ctx)
        if watermark >= MAX_WATERMARK - 1:  # no watermark comes any more: close now
            day = clock.close_all()
            self.clock_state.update(clock.state())
            if day is not None and message is not None:
                yield from self._rows(message, *summaries_of(tallies.users, day,
                                                              message.model.period_days),
                                      day)
                return
        else:
            for day in new:
                end = (day + 1) * DAY_MS - 1
                timers.register_event_time_timer(end if end > watermark else watermark + 1)
            self.clock_state.update(clock.state())
        if message is not None:
            ids, days, summaries = summaries_at(tallies.users, clock.as_of(tallies, changed),
                                                message.model.period_days)
            yield from self._emit(message, ids, days, summaries)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        clock = CloseClock(*(self.clock_state.value() or (None, ())))
        day = clock.close(ctx.timer_service().current_watermark())
        if day is None:  # an earlier timer's close covered it
            return
        self.clock_state.update(clock.state())
        message = self._model(ctx)
        if message is None:
            return
        tallies = self._tallies(ctx.get_current_key())
        yield from self._rows(message, *summaries_of(tallies.users, day,
                                                      message.model.period_days), day)

    def process_broadcast_element(self, value: str, ctx: Any) -> None:
        ctx.get_broadcast_state(MODELS).put(KEY, value)

    def _model(self, ctx: Any) -> ModelMessage | None:
        """The current model (parsed once per message)."""
        text = ctx.get_broadcast_state(MODELS).get(KEY)
        if text is None:
            return None
        if self.parsed is None or self.parsed[0] != text:
            self.parsed = (text, ModelMessage.from_json(text))
        return self.parsed[1]

    def _tallies(self, bucket: int) -> Tallies:
        tallies = self.tallies.get(bucket)
        if tallies is None:
            stored: dict[str, Orders] = dict(self.orders.items())
            tallies = self.tallies[bucket] = Tallies(stored)
        return tallies

    def _rows(self, message: ModelMessage, ids: Any, summaries: Any, day: int
              ) -> Iterator[Any]:
        yield from self._emit(message, ids, np.full(len(ids), day, dtype=np.int64), summaries)

    def _emit(self, message: ModelMessage, ids: Any, days: Any, summaries: Any
              ) -> Iterator[Any]:
        if not len(ids):
            return
        try:
            scores = message.scores(ids, summaries)
        except ValueError as error:  # the model gives a customer no finite value
            yield DEAD_LETTERS, dead_letter("ltv", "not_scored", f"not scored: {error}", None)
            return
        rows = customer_rows(ids, days, scores, message.horizon_days, message.version)
        for row in rows:
            yield table_messages.keyed((row["user_id"],), orjson.dumps(row))
