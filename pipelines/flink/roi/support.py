"""What the ROI job's operators share: the items they pass, their dead letters, and the rule by
which a keyed day (or GPU-day) is reported -- when the watermark passes it, and again after
any later input for it, whatever the watermark -- and retired. Their days are
udfs.periods'."""

from __future__ import annotations

import json
from typing import Any

from pyflink.common import Types
from pyflink.datastream import OutputTag

from pipelines.codec.dead_letters import dead_letter
from pipelines.flink.runtime.watermarks import MAX_WATERMARK

# dead letters as every job writes them (pipelines/codec/dead_letters.py)
DEAD_LETTERS = OutputTag("roi-dead-letters", Types.STRING())

# Records between the operators: (kind, key, timestamp_ms, payload)
#   credit   day          conv ts    (model, order, touch, channel, campaign, stage, credit,
#                                     revenue)
#   claim    trace id     conv ts    (order_id, day)
#   cost     trace id     interval   cost_usd (a call's own cost, or its share of idle)
#   spend    day          day start  (platform, account, campaign, amount)
#   gpu_call gpu \t day   interval   (trace id or '', cost_usd)   (fully loaded compute)
#   gpu_idle gpu \t day   interval   cost_usd                     (fully loaded compute)
#   compute  day          conv ts    (order_id, cost)       (from the link step)
#   unlinked day          interval   cost_usd               (from the link step)
#   idle_gpu day          day end    (gpu, cost_usd)   idle of a GPU-day without calls
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
