"""The roi topic's messages (the ROI job's, pipelines/flink/roi/rows.py): one JSON object a
message, its `kind`, the fields of that kind's row (schemas/rows.py) and, on a key that has
no row any more, `"withdrawn": true`; each keyed by [kind, the row's key columns...], so
every version of one row goes to one partition, in order (readers keep the latest per key).

    roi            ROI_DAILY         unallocated    ROI_UNALLOCATED (amount 0: withdrawn)
    order_cost     ORDER_COST        order_segment  ORDER_SEGMENT
    day_closed     ROI_DAY_CLOSED    (the days the job has closed)

`encode` writes one (its Kafka key and its text), `decode` reads one (RoiMessageError, a
ValueError, naming what is wrong with one that is not), `row` gives its row in the
declaration's column order. Readers: the loader (pipelines/store/sinks.py RoiSink) and the
control loop (pipelines/control/state.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from schemas import rows
from schemas.row_layout import Row

ROI, UNALLOCATED, ORDER_COST = "roi", "unallocated", "order_cost"
ORDER_SEGMENT, DAY_CLOSED = "order_segment", "day_closed"
ROWS: dict[str, Row] = {ROI: rows.ROI_DAILY, UNALLOCATED: rows.ROI_UNALLOCATED,
                        ORDER_COST: rows.ORDER_COST, ORDER_SEGMENT: rows.ORDER_SEGMENT,
                        DAY_CLOSED: rows.ROI_DAY_CLOSED}
# fields a reader takes as None where absent (roi rows written before the ratios existed)
OPTIONAL = {ROI: frozenset(("roas", "margin_roi"))}


class RoiMessageError(ValueError):
    """A roi topic message that cannot be read, said plainly."""


class RoiMessage(NamedTuple):
    kind: str
    values: dict[str, Any]  # the message's fields but `kind` and `withdrawn`
    withdrawn: bool = False


def encode(kind: str, values: Mapping[str, Any], withdrawn: bool = False
           ) -> tuple[tuple[Any, ...], str]:
    """The Kafka key ([kind, key columns...]) and the message of one row of `kind`, its
    fields from `values`; `withdrawn`: the key has no row any more (a reader deletes it)."""
    layout = _layout(kind)
    missing = [name for name in layout.names if name not in values]
    if missing:
        raise RoiMessageError(f"roi message of kind {kind}: field '{missing[0]}' is missing")
    body = {"kind": kind, **{name: values[name] for name in layout.names}}
    if withdrawn:
        body["withdrawn"] = True
    return (kind, *(values[name] for name in layout.key)), json.dumps(body,
                                                                      separators=(",", ":"))


def decode(value: bytes | str, default_kind: str | None = None) -> RoiMessage:
    """One message: its kind, its other fields as they came, whether it withdraws its key.
    RoiMessageError if it is not JSON, not an object, or has no kind (`default_kind`: the
    kind of a message without one)."""
    try:
        data = json.loads(value)
    except (TypeError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise RoiMessageError(f"roi message is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise RoiMessageError(f"roi message is not a JSON object: {type(data).__name__}")
    kind = data.pop("kind", default_kind)
    if not isinstance(kind, str):
        raise RoiMessageError(f"roi message without a kind (got {kind!r})")
    return RoiMessage(kind, data, bool(data.pop("withdrawn", False)))


def row(message: RoiMessage) -> tuple[Any, ...]:
    """The message's row (ROWS[kind]: the declaration's columns, in order);
    RoiMessageError naming a missing field or an unknown kind."""
    layout = _layout(message.kind)
    optional = OPTIONAL.get(message.kind, frozenset())
    values = message.values
    try:
        return tuple(values.get(name) if name in optional else values[name]
                     for name in layout.names)
    except KeyError as error:
        raise RoiMessageError(f"roi message of kind {message.kind}: field {error} is "
                              "missing") from None


def _layout(kind: str) -> Row:
    layout = ROWS.get(kind)
    if layout is None:
        raise RoiMessageError(f"roi message: no kind {kind!r} (one of {', '.join(ROWS)})")
    return layout
