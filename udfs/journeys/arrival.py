"""Which events count: decided by arrival, a property of each record.

An event counts when it reached Kafka no more than the correction horizon
(`journey.correction_days`) after it happened: its record's timestamp (CreateTime, or the
broker's LogAppendTime on a topic configured so) minus its event time. Both travel with the
record, so the decision is the same however the topic is partitioned, keyed, compressed,
read, paused or restarted; watermarks only decide when results are emitted. The stream
(pipelines/flink/attribution/decode.py), the backfill and `seedance attribute` all ask this
module.

A record without a timestamp (an old message format: -1) counts: nothing says it came late.
With horizon 0 corrections are off and arrival decides nothing: the watermark alone does
(every event behind it is late, as timing decides).
"""

from __future__ import annotations

import numpy as np

NO_ARRIVAL = -1  # Kafka's timestamp of a record that has none


def arrived_in_time(ts_ms: np.ndarray, arrival_ms: np.ndarray | int,
                    horizon_ms: int) -> np.ndarray:
    """For each event, whether it counts: it arrived at most `horizon_ms` after its time
    (or its arrival is unknown, or the horizon is 0)."""
    ts = np.asarray(ts_ms, dtype=np.int64)
    if horizon_ms <= 0:
        return np.ones(len(ts), dtype=bool)
    arrival = np.broadcast_to(np.asarray(arrival_ms, dtype=np.int64), ts.shape)
    return (arrival <= 0) | (arrival - ts <= horizon_ms)


def arrival_bound(arrival_ms: np.ndarray | int, horizon_ms: int) -> np.ndarray:
    """The oldest event time that still counts for a record that arrived then (what a late
    event's row names as the bound it missed)."""
    return np.asarray(arrival_ms, dtype=np.int64) - horizon_ms


def correction_reach_ms(horizon_ms: int, max_future_ms: int) -> int:
    """How far behind a stream's watermark an event that counts can reach its journey, so
    how much of its users' past the stream keeps to correct with.

    The watermark is the minimum over the partitions that still have records to read, each
    at most its newest event time so far; those events arrived no later than the record at
    hand (a partition is appended in arrival order) and ran at most `max_future_ms` ahead of
    their arrival (the source stamps no event time beyond that). An event that counts
    happened at most `horizon_ms` before its arrival. So it is at most
    `horizon_ms + max_future_ms` behind the watermark. With horizon 0 nothing corrects."""
    return horizon_ms + max_future_ms if horizon_ms > 0 else 0
