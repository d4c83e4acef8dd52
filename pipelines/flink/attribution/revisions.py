"""Changes to orders after they were credited, in the operators that credit them: the
journeys (the conversion and the per-conversion models) and the data-driven crediting.

With an orders change stream (`order_changes.topic`), each operator keeps, per user
bucket, what it reported of every order for `order_changes.window_days`: map
"credited-orders", order id -> (order time, revenue, conversion row or None, credit rows
packed by udfs.orders.packed_credits), as computed from the journey; and the latest
revision of each order: map "order-revisions", order id -> (revenue, changed_ms, order
time). A revision that comes after the order was reported writes its rows again with the
revenue it has now (a reader keeps the last version of a conversion's rows:
pipelines/codec/credit_messages.py); one that comes before is applied when the order is
reported, and to every later version of its rows (a correction, a refit). Without a
change stream nothing is kept and nothing is looked up. Kept per order (bench sample, 8
models): about 770 B in the journeys (the conversion row with its traces: most of it)
and 390 B in the data-driven crediting."""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from typing import Any

from pyflink.common import Types
from pyflink.datastream import RuntimeContext
from pyflink.datastream.state import MapStateDescriptor

from pipelines.flink.attribution.support import PICKLE_PROTOCOL, put_all
from udfs.orders import (
    CONVERSION_REVENUE,
    OrderRevision,
    credits_by_order,
    order_revenue,
    packed_credits,
    revised_conversion,
    revised_credits,
    supersedes,
    unpacked_credits,
)
from udfs.periods import DAY_MS

Rows = list[tuple[Any, ...]]
CONVERSION_TS = 2  # in a conversion row (rows.CONVERSION)
CREDIT_TS = 3  # in a credit row (rows.CREDIT)


class OrderRevisions:
    """One operator's revisions and credited orders, in its keyed state (the current key:
    the user bucket)."""

    def __init__(self, runtime_context: RuntimeContext, window_ms: int,
                 process_mode: bool) -> None:
        self.window_ms = window_ms
        self.process_mode = process_mode
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.revised = runtime_context.get_map_state(
            MapStateDescriptor("order-revisions", Types.STRING(), pickled))
        self.credited = runtime_context.get_map_state(
            MapStateDescriptor("credited-orders", Types.STRING(), pickled))
        self.swept: dict[int, int] = {}  # bucket -> the day its state was last swept

    @property
    def active(self) -> bool:
        return self.window_ms > 0

    def reported(self, conversions: Rows, credits: Sequence[Sequence[Any]]
                 ) -> tuple[Rows, Rows]:
        """Rows about to be reported: kept as they are, and returned with the revenue of
        each revised order as it is now."""
        if not self.active:
            return conversions, list(credits)
        by_order = credits_by_order(credits)
        conversion_of = {row[0]: row for row in conversions}
        kept: dict[str, bytes] = {}
        revenue: dict[str, float] = {}
        for order in conversion_of.keys() | by_order.keys():
            conversion = conversion_of.get(order)
            rows = by_order.get(order, [])
            ts, revenue_then = (conversion[CONVERSION_TS], conversion[CONVERSION_REVENUE]) \
                if conversion is not None else (rows[0][CREDIT_TS], order_revenue(rows))
            kept[order] = pickle.dumps((ts, revenue_then, conversion, packed_credits(rows)),
                                       PICKLE_PROTOCOL)
            known = self.revised.get(order)
            if known is not None:
                revenue[order] = known[0]
        if kept:
            put_all(self.credited, kept, self.process_mode)
        if not revenue:
            return conversions, list(credits)
        return ([revised_conversion(row, revenue[row[0]]) if row[0] in revenue else row
                 for row in conversions],
                [out for order, rows in by_order.items()
                 for out in (revised_credits(rows, revenue[order]) if order in revenue
                             else rows)])

    def revise(self, revisions: list[OrderRevision]) -> tuple[Rows, Rows]:
        """Revisions of this bucket's orders: remembered, and the rows to report again of
        those already reported (conversions, credits)."""
        conversions: Rows = []
        credits: Rows = []
        for revision in revisions:
            order = revision.order_id
            known = self.revised.get(order)
            if not supersedes(revision, known):
                continue  # a newer change of it came first
            self.revised.put(order, (revision.revenue, revision.changed_ms,
                                     revision.order_ts_ms))
            stored = self.credited.get(order)
            if stored is None:
                continue  # not reported yet: applied when it is
            _, revenue_then, conversion, packed = pickle.loads(stored)
            reported = revenue_then if known is None else known[0]
            if math.isclose(reported, revision.revenue, rel_tol=1e-12, abs_tol=1e-9):
                continue  # what was reported holds (the table says what a span said)
            if conversion is not None:
                conversions.append(revised_conversion(conversion, revision.revenue))
            if packed[0]:
                credits += unpacked_credits(packed, revision.revenue)
        return conversions, credits

    def expire(self, bucket: int, watermark: int) -> None:
        """Forget what is older than the window behind `watermark`, at most once a day of
        event time per bucket (a walk over the bucket's kept orders)."""
        day = watermark // DAY_MS
        if not self.active or self.swept.get(bucket) == day:
            return
        self.swept[bucket] = day
        cutoff = watermark - self.window_ms
        for state, at in ((self.credited, 0), (self.revised, 2)):
            old = [order for order, value in state.items()
                   if _when(value, at) < cutoff]
            for order in old:
                state.remove(order)


def _when(value: Any, at: int) -> int:
    return int((pickle.loads(value) if isinstance(value, bytes) else value)[at])
