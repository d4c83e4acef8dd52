"""The ROI job's rows on the roi topic: each keyed by its row's key (keyed_row), and the
markers of the days it has closed (schemas/rows.py ROI_DAY_CLOSED), which `seedance verify`
reads to tell a day still filling from a break.

A day is closed in two parts. `rows`: the watermark passed the day's end, so its credits
and spend are in its report. `compute`: the watermark also passed the link window after it,
so every GPU cost of the day has been placed, on an order or unallocated (the compute of an
order of the day may come from up to a window later). Input after that still restates the
day, as before; a closed day is one whose figures are expected to tie."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.codec import roi_messages
from pipelines.flink.roi.support import ending
from pipelines.flink.runtime.kafka import keyed_line
from udfs.periods import day_end_ms

ROWS, COMPUTE = "rows", "compute"


def keyed_row(kind: str, values: dict[str, Any], withdrawn: bool = False) -> str:
    """One result row of `kind` (pipelines/codec/roi_messages.py) for the keyed roi sink:
    its key (kind and the row's key columns) and its message, so every version of one row
    goes to one partition, in order. `withdrawn`: the key has no row any more (a reader
    deletes it)."""
    return keyed_line(*roi_messages.encode(kind, values, withdrawn))


def schedule_close(timers: Any, day: str, link_window_ms: int) -> None:
    """After input for `day`: a timer at the end of the link window after it, where its
    compute closes (its rows close on the day-end timer of schedule_report)."""
    if link_window_ms > 0 and timers.current_watermark() < day_end_ms(day) + link_window_ms:
        timers.register_event_time_timer(day_end_ms(day) + link_window_ms)


def closed_rows(timers: Any, day: str, timestamp: int, link_window_ms: int,
                bounded: bool) -> Iterator[str]:
    """The markers a timer at `timestamp` closes for `day`: `rows` at the day's end,
    `compute` a link window later. None at the final watermark of a drained stop: the
    stream goes on after it, the day is not closed (a bounded run's end closes it)."""
    if not bounded and ending(timers):
        return
    end = day_end_ms(day)
    for part, at in ((ROWS, end), (COMPUTE, end + link_window_ms)):
        if timestamp == at and link_window_ms > 0:
            yield keyed_row(roi_messages.DAY_CLOSED,
                            {"day": day, "part": part, "watermark_ms": timestamp})
