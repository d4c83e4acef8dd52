"""The ROI job's LTV segments (`roi.allocation_weights: ltv_segment`): keyed by user, each
order's segment (and its customer's value) as of its day under the allocation model, sent
on to the day's ROI.

A user's orders are kept in keyed state (order id -> (ts_ms, revenue); a later version of
an order replaces it). When an order comes, the segments of the user's orders from its day
on are worked out again (`udfs.ltv.allocation.OrderSegmenter`: an earlier order that came
late changes the later ones), and each that changed is sent as an ItemKind.ORDER_SEGMENT
item (day, ts, (order id, segment, value, user)) to the day's RoiPerDay, which reports the
day again (and the order's order_segment row). No timers:
what is sent depends on the user's orders alone, so the stream's segments are the
backfill's (pipelines/backfill/roi.py order_segments).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import DataStream, KeyedProcessFunction, OutputTag, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor

from pipelines.flink.roi.support import Item, ItemKind
from udfs.ltv import OrderSegmenter, day_number
from udfs.periods import day_of

# the conversions decoder's orders, for the segments: ItemKind.ORDER items (user, ts,
# (order, ts, revenue))
ORDER_HISTORY = OutputTag("order-history", Types.PICKLED_BYTE_ARRAY())


def order_items(rows: list[dict[str, Any]]) -> list[Item]:
    """The orders of a conversions message's rows that have a known user; ValueError (or
    KeyError) on a row without a usable time or revenue."""
    items: list[Item] = []
    for row in rows:
        user = str(row.get("user_id") or "")
        if user:
            value = row["revenue"]
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                raise ValueError(f"order {row['order_id']}: revenue is not a number: "
                                 f"{value!r}")
            ts, revenue = int(row["conversion_ts_ms"]), float(value)
            items.append((ItemKind.ORDER, user, ts, (str(row["order_id"]), ts, revenue)))
    return items


class SegmentOrders(KeyedProcessFunction):  # type: ignore[misc]
    """Per user: its orders, and the segment last sent for each (module doc)."""

    def __init__(self, segmenter: OrderSegmenter) -> None:
        self.segmenter = segmenter

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.orders = runtime_context.get_map_state(
            MapStateDescriptor("orders", Types.STRING(), pickled))
        self.sent = runtime_context.get_map_state(
            MapStateDescriptor("segments-sent", Types.STRING(), Types.STRING()))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Item]:
        _, user, _, (order_id, ts, revenue) = item
        self.orders.put(order_id, (int(ts), float(revenue)))
        orders = dict(self.orders.items())
        since = day_number(ts)
        days = {day for day in (day_number(at) for at, _ in orders.values()) if day >= since}
        scores = self.segmenter.scores({user: orders}, {user: days})
        for order, (segment, value) in sorted(scores.items()):
            sent = f"{segment}\t{value!r}"
            if self.sent.get(order) != sent:
                self.sent.put(order, sent)
                at = orders[order][0]
                yield ItemKind.ORDER_SEGMENT, day_of(at), at, (order, segment, value, user)


def segmented(history: DataStream, segmenter: OrderSegmenter) -> DataStream:
    """The segment items of the conversions decoder's orders (ORDER_HISTORY, with their
    event time), keyed by user (the caller gives the operator its uid)."""
    return history.key_by(lambda item: item[1], key_type=Types.STRING()) \
        .process(SegmentOrders(segmenter)).name("segment-orders")
