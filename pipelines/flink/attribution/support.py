"""What the attribution job's operators share: their side outputs, the accounting record,
the batch record between decoder and journeys, and how they keep Python's costs down."""

from __future__ import annotations

import gc
from typing import Any

import orjson
from pyflink.common import Types
from pyflink.datastream import OutputTag

from schemas import rows
from schemas.records import Conversion, Touchpoint
from udfs.attribution import Period, PeriodRuns, runs_periods

DEAD_LETTERS = OutputTag("dead-letters", Types.STRING())
LATE_EVENTS = OutputTag("late-events", Types.STRING())
# A bucket's converted journeys, kept where they closed to be credited there (credit.py):
# (bucket, sequence number, "n" for a step's runs or "c" for a correction, the periods'
# ends, the pickled runs or (retracted, added) periods)
CLOSED_JOURNEYS = OutputTag("closed-journeys", Types.PICKLED_BYTE_ARRAY())
# ... and their counts per path, to the fit (fit.py): (bucket, the sequence number of the
# bucket's last CLOSED_JOURNEYS message, the periods' counts added, those retracted)
PATH_COUNTS = OutputTag("path-counts", Types.PICKLED_BYTE_ARRAY())
# What the fit sends a bucket (its first field the bucket):
# (bucket, FITTED_WEIGHTS, the bucket's sequence number counted, the fit's watermark,
# [(period end, udfs.attribution.FittedModels of the bucket's paths in it)] in period
# order: every period one settling settled)
FITTED_WEIGHTS = 0
# (bucket, KEPT_JOURNEYS, period end, sign, ConvertedJourneys): journeys an earlier
# version of the fit kept (pending or settled), handed to their bucket once
KEPT_JOURNEYS = 1
DUPLICATE_ORDERS = OutputTag("duplicate-orders", Types.STRING())
# orders, from the decoder to the duplicate check: (order id's bucket, 0, rows)
ORDERS = OutputTag("orders", Types.PICKLED_BYTE_ARRAY())
# a Batch whose "newest event time" is this carries order copies (rows in Conversion's
# field order, pickled) to withdraw from the bucket's journeys: duplicates
WITHDRAWN = -(2**63)
# ... and this: orders the duplicate check admitted after holding them (they were behind
# the watermark when decoded, so they reach their journeys only once admitted)
ADMITTED = -(2**63) + 1
# ... and this: changes to orders from the orders' change stream (udfs.orders.OrderRevision
# as plain tuples, pickled), to the bucket of the order's user (revisions.py)
REVISED = -(2**63) + 2
# credits and conversions are JSON tables handed to Flink as UTF-8 bytes (see
# table_messages.encode_bytes)
RESULT_TYPE = Types.PRIMITIVE_ARRAY(Types.BYTE())
CONVERSIONS = OutputTag("conversions", RESULT_TYPE)
ACCOUNTING = OutputTag("accounting", Types.PICKLED_BYTE_ARRAY())

# What became of every input record (a span; a message that cannot be split into spans
# counts as one): used (a touch or an order) = processed + late; other = spans this job
# has no use for (GPU calls are the GPU cost job's, plain tracing spans nobody's).
# `other` is broken down by why: valid GPU calls and ordinary tracing spans; orders seen
# before (duplicate_orders) are used, and dead-lettered, not processed.
COUNTS = rows.ACCOUNTING.without("job", "processed", "final").names


def counted(**counts: int) -> tuple[int, ...]:
    """An accounting record: the COUNTS named, the rest 0."""
    unknown = counts.keys() - set(COUNTS)
    if unknown:
        raise KeyError(f"not an accounting count: {', '.join(sorted(unknown))}")
    return tuple(counts.get(name, 0) for name in COUNTS)


ONE_LATE = counted(late=1)
ONE_EXPIRED = counted(late=1, expired=1)
ONE_DUPLICATE_ORDER = counted(dead_lettered=1, duplicate_orders=1)


Event = Touchpoint | Conversion
Batch = tuple[int, int, bytes]
"""One message's events of one user bucket: (bucket, newest event time, the events as
columns (schemas.events.EventColumns), packed: schemas.events.pack).

The events are packed once, by the decoder, and read once, by the journey book: between
the two the record passes the timestamp assigner and the key selector, Python operators
of their own that would otherwise each unpickle and pickle every event again."""


PICKLE_PROTOCOL = 5


def collect_garbage_rarely() -> None:
    """Python's cyclic garbage collector, with its default thresholds, runs every 700 new
    objects and rescans every survivor again and again as they pile up: the books' user
    states, the credit rows of a refit period. Measured here it took a third to a half of
    the operators' time (1.2 million spans, bench/streaming.py; a refit period's credits
    6.0 s -> 2.6 s). What these operators keep has no reference cycles (reference counting
    frees it), so collecting rarely frees the same memory."""
    gc.set_threshold(50_000, 20, 100)


def stored_periods(stored: PeriodRuns | list[Period]) -> list[Period]:
    """The periods of a step's closed journeys as earlier versions of the fit stored them:
    runs of one table, or a list of periods."""
    return stored if isinstance(stored, list) else runs_periods(stored)


def put_all(state: Any, values: dict[Any, Any], process_mode: bool) -> None:
    # PyFlink 2.2's process-mode map state reads put_all's argument as (key, value) pairs;
    # the thread-mode one wants a dict
    state.put_all(values.items() if process_mode else values)



# Why an event is on the late-events topic:
ARRIVED_LATE = "arrived_late"  # it reached Kafka more than the horizon after it happened
# it arrived in time, but behind what the job still keeps of its users (the watermark ran
# further ahead of it than the reach of corrections): lost, an alarm (accounting `expired`)
STATE_EXPIRED = "state_expired"
BEHIND_WATERMARK = "behind_watermark"  # corrections off (horizon 0): behind the watermark


def event_json(event: Event, bound: int, reason: str) -> str:
    """A late event as the late-events topic carries it, with why and the bound it missed
    (`watermark_ms`: the oldest event time that still counted)."""
    body = {"type": "touchpoint" if isinstance(event, Touchpoint) else "conversion",
            **event._asdict(), "watermark_ms": bound, "reason": reason}
    return orjson.dumps(body).decode()

