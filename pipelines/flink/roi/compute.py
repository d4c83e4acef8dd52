"""The ROI job's compute side: GPU cost brought to the conversions.

ShareIdleCost  keyed by GPU and UTC day: with `roi.compute_cost: fully_loaded`, the GPU-day's
               idle cost shared over its calls by their cost (udfs.roi.compute_loading), each
               share passed on as a cost of the call's trace; a GPU-day without calls keeps
               its idle cost (ItemKind.UNSHARED_IDLE, unallocated under the GPU's id)
LinkTraceCosts keyed by trace: a trace's costs go to the conversion that claims it
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from pipelines.flink.roi.support import (
    DEAD_LETTERS,
    Item,
    ItemKind,
    ending,
    retired_letter,
    schedule_report,
)
from udfs.periods import day_end_ms, day_of
from udfs.roi import call_shares


class ShareIdleCost(KeyedProcessFunction):  # type: ignore[misc]
    """Per GPU and UTC day: its calls (trace, time, cost) and idle cost. Each report emits
    what changed since the last: the difference between every call's share now and the
    share emitted before (as a cost of its trace, or unlinked compute for a call without
    one), and of the unshared idle, so downstream sums converge to the shares of all input.
    Direct costs (`cost`, `unlinked`) pass through."""

    def __init__(self, retention_ms: int | None, source: str = "roi") -> None:
        self.retention_ms = retention_ms
        self.source = source

    def open(self, runtime_context: RuntimeContext) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        self.calls = runtime_context.get_list_state(ListStateDescriptor("gpu-calls", pickled))
        self.idle = runtime_context.get_state(ValueStateDescriptor("gpu-idle", pickled))
        # [shares emitted per call, in call order; unshared idle emitted]
        self.emitted = runtime_context.get_state(ValueStateDescriptor("gpu-emitted", pickled))
        self.retired = runtime_context.get_state(ValueStateDescriptor("gpu-retired", pickled))

    def process_element(self, item: Item, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        kind, key, ts, payload = item
        if kind not in (ItemKind.GPU_CALL_COST, ItemKind.IDLE_TO_SHARE):
            yield item
            return
        if self.retired.value():
            yield DEAD_LETTERS, retired_letter(self.source, kind, key, payload)
            return
        if kind == ItemKind.GPU_CALL_COST:
            trace, cost = payload
            self.calls.add((trace, ts, cost))
        else:
            self.idle.update((self.idle.value() or 0.0) + payload)
        if schedule_report(ctx.timer_service(), day_end_ms(key.rsplit("\t", 1)[1]),
                           self.retention_ms):
            yield from self._report(key)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Item]:
        key = ctx.get_current_key()
        if self.retention_ms is not None \
                and timestamp >= day_end_ms(key.rsplit("\t", 1)[1]) + self.retention_ms:
            if ending(ctx.timer_service()):
                return
            for state in (self.calls, self.idle, self.emitted):
                state.clear()
            self.retired.update(True)
            return
        yield from self._report(key)

    def _report(self, key: str) -> Iterator[Item]:
        gpu, day = key.rsplit("\t", 1)  # the day has no tab; a GPU id may
        end = day_end_ms(day)
        calls = list(self.calls.get() or [])
        idle = self.idle.value() or 0.0
        shares = call_shares([cost for _, _, cost in calls], idle).tolist()
        before, unshared_before = self.emitted.value() or ([], 0.0)
        before = before + [0.0] * (len(calls) - len(before))
        for (trace, ts, _), share, old in zip(calls, shares, before, strict=True):
            if share != old:
                yield (ItemKind.TRACE_COST, trace, ts, share - old) if trace \
                    else (ItemKind.UNLINKED, day_of(ts), ts, share - old)
        unshared = idle if sum(cost for _, _, cost in calls) <= 0 else 0.0
        if unshared != unshared_before:
            yield ItemKind.UNSHARED_IDLE, day, end, (gpu, unshared - unshared_before)
        self.emitted.update((shares, unshared))


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
    the life of the job, as a bounded run does). Items keyed by day pass through."""

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
        if kind in (ItemKind.UNLINKED, ItemKind.UNSHARED_IDLE):  # keyed by day: no wait
            yield item
            return
        timers = ctx.timer_service()
        claim = self.claim.value()
        costs = self.costs.value() or []
        if kind == ItemKind.TRACE_CLAIM:
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
            if timestamp >= last + self.window_ms + self.retention_ms \
                    and not ending(ctx.timer_service()):
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
        return ItemKind.ORDER_COMPUTE, day, claim_ts, (order_id, cost)
    return ItemKind.UNLINKED, placed[1], ts, cost
