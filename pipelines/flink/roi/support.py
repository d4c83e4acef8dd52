"""What the ROI job's operators share: the items they pass, their dead letters, and the rule by
which a keyed day (or GPU-day) is reported -- when the watermark passes it, and again after
any later input for it, whatever the watermark -- and retired. Their days are
udfs.periods'."""

from __future__ import annotations

import json
from typing import Any, Final

from pyflink.common import Types
from pyflink.datastream import OutputTag

from pipelines.codec.dead_letters import dead_letter
from pipelines.flink.runtime.watermarks import MAX_WATERMARK

# dead letters as every job writes them (pipelines/codec/dead_letters.py)
DEAD_LETTERS = OutputTag("roi-dead-letters", Types.STRING())


class ItemKind:
    """The kinds of item the ROI job's operators pass (an Item's first field), each named
    once here. The values are plain strings (no Enum: what is pickled stays a str): records in
    flight in a checkpoint and the dead letters of retired state hold them, so a value
    never changes, only these names.
    Two read alike and differ: IDLE_TO_SHARE is an idle interval's cost of a GPU-day on its
    way to be shared over the day's calls; UNSHARED_IDLE is what a GPU-day without calls
    kept of it, on its way to the day's unallocated compute under the GPU's id.

    kind            key           timestamp  payload
    CREDIT          day           conv ts    (model, order, rows: (model, order, touch,
                                              channel, campaign, stage, credit, revenue))
    TRACE_CLAIM     trace id      conv ts    (order_id, day)
    TRACE_COST      trace id      interval   cost_usd (a call's own cost, or its share of
                                             idle)
    SPEND           day           day start  (platform, account, campaign, amount)
    GPU_CALL_COST   gpu \t day    interval   (trace id or '', cost_usd)  (fully loaded)
    IDLE_TO_SHARE   gpu \t day    interval   cost_usd                    (fully loaded)
    ORDER_COMPUTE   day           conv ts    (order_id, cost)   (from the link step)
    UNLINKED        day           interval   cost_usd           (from the link step)
    UNSHARED_IDLE   day           day end    (gpu, cost_usd)    idle of a GPU-day without
                                                                calls
    ORDER           user          conv ts    (order_id, ts, revenue)  (to the segments)
    ORDER_SEGMENT   day           order ts   (order_id, segment, value, user)
    """

    CREDIT: Final = "credit"
    TRACE_CLAIM: Final = "claim"
    TRACE_COST: Final = "cost"
    SPEND: Final = "spend"
    GPU_CALL_COST: Final = "gpu_call"
    IDLE_TO_SHARE: Final = "gpu_idle"
    ORDER_COMPUTE: Final = "compute"
    UNLINKED: Final = "unlinked"
    UNSHARED_IDLE: Final = "idle_gpu"
    ORDER: Final = "order"
    ORDER_SEGMENT: Final = "segment"


# Records between the operators: (kind, key, timestamp_ms, payload), as ItemKind lists
Item = tuple[str, str, int, Any]


def schedule_report(timers: Any, end_ms: int, retention_ms: int | None) -> bool:
    """After input for a period ending at `end_ms`: report it when the watermark passes its
    end, or -- input behind the watermark -- at the next watermark. True where no watermark
    comes any more (it is at its end, as at the end of a drained stop): the caller reports
    at once. (A timer would not do: the job may finish before any processing-time timer
    fires, and input does come after the final watermark, from an input that was idle
    while the others' final watermarks went through.) With a retention, the period is
    retired that long after its end."""
    watermark = timers.current_watermark()
    if retention_ms is not None and watermark < MAX_WATERMARK - 1:
        timers.register_event_time_timer(end_ms + retention_ms)
    if watermark < end_ms:
        timers.register_event_time_timer(end_ms)
    elif watermark < MAX_WATERMARK - 1:
        timers.register_event_time_timer(watermark + 1)
    else:
        return True
    return False


def ending(timers: Any) -> bool:
    """Whether the watermark is at its end (a bounded input's or a drained stop's last):
    no state is retired then. The final watermark passes every retention timer at once,
    while input from an input that was idle may still be on its way; the state goes into
    the final savepoint as it is."""
    return bool(timers.current_watermark() >= MAX_WATERMARK - 1)


def retired_letter(source: str, kind: str, key: str, payload: Any) -> str:
    return dead_letter(
        source, "state_retired", f"{kind} input for {key} came after its state was retired "
        "(roi.retention_days after the day): not folded into a partial day",
        json.dumps([kind, key, payload], default=str).encode())
