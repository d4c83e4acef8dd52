"""The attribution job's run accounting: what became of every input record, totalled in
keyed state and published to the `run_accounting` topic (read back by
pipelines/store/accounting.py)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, TimeDomain
from pyflink.datastream.state import ValueStateDescriptor

from pipelines.flink.attribution.support import COUNTS


class RunAccounting(KeyedProcessFunction):  # type: ignore[misc]
    """Totals of COUNTS since the job began (kept in state, so a restart continues them);
    published every `every_ms` of processing time and when a bounded input ends."""

    def __init__(self, job: str, every_ms: int) -> None:
        self.job = job
        self.every_ms = every_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        self.totals = runtime_context.get_state(
            ValueStateDescriptor("totals", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, counts: tuple[int, ...],
                        ctx: KeyedProcessFunction.Context) -> None:
        totals = self.totals.value()
        if totals is None:
            totals = (0,) * len(COUNTS)
            # the end of a bounded input brings the final watermark: the last report
            ctx.timer_service().register_event_time_timer(2**63 - 1)
            now = ctx.timer_service().current_processing_time()
            ctx.timer_service().register_processing_time_timer(now + self.every_ms)
        # totals an earlier version kept have fewer counts: the new ones start at 0
        totals = (*totals, *(0,) * (len(COUNTS) - len(totals)))
        self.totals.update(tuple(a + b for a, b in zip(totals, counts, strict=True)))

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[str]:
        final = ctx.time_domain() == TimeDomain.EVENT_TIME
        if not final:
            ctx.timer_service().register_processing_time_timer(timestamp + self.every_ms)
        yield accounting_json(self.job, self.totals.value() or (0,) * len(COUNTS), final)


def accounting_json(job: str, totals: tuple[int, ...], final: bool) -> str:
    totals = (*totals, *(0,) * (len(COUNTS) - len(totals)))  # kept by an earlier version
    row = dict(zip(COUNTS, totals, strict=True))
    row["processed"] = row["used"] - row["late"] - row["duplicate_orders"]
    return orjson.dumps({"job": job, **row, "final": final}).decode()
