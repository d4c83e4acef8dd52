"""Touchpoints and orders as columns: the form the attribution job moves them in.

A batch of events is two small tables (numpy arrays, strings as object arrays) rather than
a list of records: the decoder fills them without a Python object per event, they pickle
as a few arrays between Flink operators, and the journey book steps them with array
operations. `records_of` and `events_of` convert to and from `schemas.records`.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from schemas.records import Conversion, Touchpoint

_new = tuple.__new__


class TouchColumns(NamedTuple):
    """Touchpoints: Touchpoint's fields, one array each."""

    user_id: np.ndarray  # object (str)
    ts_ms: np.ndarray  # int64
    channel: np.ndarray  # object
    campaign: np.ndarray  # object
    trace_id: np.ndarray  # object
    span_id: np.ndarray  # object


class OrderColumns(NamedTuple):
    """Orders: Conversion's fields, one array each."""

    user_id: np.ndarray  # object
    ts_ms: np.ndarray  # int64
    order_id: np.ndarray  # object
    revenue: np.ndarray  # float64
    currency: np.ndarray  # object
    trace_id: np.ndarray  # object
    span_id: np.ndarray  # object


class EventColumns(NamedTuple):
    """A batch of events: each kind in arrival order."""

    touches: TouchColumns
    orders: OrderColumns


def size(events: EventColumns) -> int:
    return len(events.touches.ts_ms) + len(events.orders.ts_ms)


def earliest(events: EventColumns) -> int:
    """The earliest event time of a batch with at least one event."""
    return min(int(column.min()) for column in (events.touches.ts_ms, events.orders.ts_ms)
               if len(column))


def newest(events: EventColumns) -> int:
    """The newest event time of a batch with at least one event."""
    return max(int(column.max()) for column in (events.touches.ts_ms, events.orders.ts_ms)
               if len(column))


def object_array(values: Sequence[object]) -> np.ndarray:
    """An object array holding `values` as they are (np.array would make strings a
    fixed-width str dtype, and nested sequences more dimensions)."""
    out = np.empty(len(values), object)
    out[:] = values
    return out


_DTYPES = {"ts_ms": np.int64, "revenue": np.float64}


def _columns(kind: type, rows: Sequence[Sequence[object]]) -> tuple[np.ndarray, ...]:
    fields = kind._fields  # type: ignore[attr-defined]
    if not rows:
        return tuple(np.zeros(0, _DTYPES.get(name, object)) for name in fields)
    out = []
    for name, values in zip(fields, zip(*rows, strict=True), strict=True):
        array = np.empty(len(values), _DTYPES.get(name, object))
        array[:] = values
        out.append(array)
    return tuple(out)


def touch_columns(touches: Sequence[Sequence[object]]) -> TouchColumns:
    """Columns of touchpoints (Touchpoints or tuples in its field order)."""
    return TouchColumns(*_columns(Touchpoint, touches))


def order_columns(orders: Sequence[Sequence[object]]) -> OrderColumns:
    return OrderColumns(*_columns(Conversion, orders))


def events_of(records: Iterable[Touchpoint | Conversion]) -> EventColumns:
    """Records as columns (each kind keeps its order)."""
    touches: list[Touchpoint] = []
    orders: list[Conversion] = []
    for record in records:
        if type(record) is Conversion:
            orders.append(record)
        else:
            touches.append(record)
    return EventColumns(touch_columns(touches), order_columns(orders))


def records_of(events: EventColumns) -> list[Touchpoint | Conversion]:
    """The touches, then the orders, as records."""
    touches = [_new(Touchpoint, row) for row in zip(*(c.tolist() for c in events.touches),
                                                    strict=True)]
    orders = [_new(Conversion, row) for row in zip(*(c.tolist() for c in events.orders),
                                                   strict=True)]
    return [*touches, *orders]


_Columns = TypeVar("_Columns", TouchColumns, OrderColumns)


def take(columns: _Columns, index: np.ndarray | slice) -> _Columns:
    """The rows `index` selects (a mask, positions or a slice), as the same type."""
    return type(columns)(*(column[index] for column in columns))


def concat(parts: Sequence[_Columns]) -> _Columns:
    """Rows of several tables of one kind, one after the other."""
    if len(parts) == 1:
        return parts[0]
    return type(parts[0])(*(np.concatenate(columns) for columns in zip(*parts, strict=True)))


EMPTY = EventColumns(touch_columns([]), order_columns([]))


# --- a batch as bytes ---------------------------------------------------------------------
# Batches cross from the decoder to the journeys operator and are stored as they came, so
# their encoding is paid per message and bucket. Pickling numpy object arrays costs about
# 250 us a batch both ways (a reduce call per array, a Python object per string); a
# column's strings joined into one str, numbers as raw bytes, cost about a fifth of that.
_SEPARATOR = "\x00"


def _pack_column(column: np.ndarray) -> bytes | str | list[str]:
    if column.dtype != object:
        return column.tobytes()
    values = column.tolist()
    text = _SEPARATOR.join(values)
    if text.count(_SEPARATOR) != max(len(values) - 1, 0):
        return values  # a value holds the separator itself: kept as a list
    return text


def _unpack_column(packed: bytes | str | list[str], dtype: type, rows: int) -> np.ndarray:
    if isinstance(packed, bytes):
        return np.frombuffer(packed, dtype)
    if not rows:
        return np.empty(0, object)
    return object_array(packed.split(_SEPARATOR) if isinstance(packed, str) else packed)


PackedParts = tuple[int, int, list, list]
"""`pack`'s form before pickling: the touch and order counts, then each kind's packed
columns (the decoder's C scanner makes this form too)."""


def packed_parts(events: EventColumns) -> PackedParts:
    touches, orders = events
    return (len(touches.ts_ms), len(orders.ts_ms), [_pack_column(c) for c in touches],
            [_pack_column(c) for c in orders])


def packed_split(columns: tuple, order: np.ndarray, bounds: list[tuple[int, int]]
                 ) -> list[list] | None:
    """The columns' rows taken in `order` and cut at `bounds` (start, end), each piece
    packed as `packed_parts` packs a column: every column packed once and cut, not packed
    once per piece. None: a string holds the separator (pack the pieces one by one)."""
    out: list[list] = [[] for _ in bounds]
    for column in columns:
        ordered = column[order]
        if ordered.dtype != object:
            data, width = ordered.tobytes(), ordered.itemsize
            for piece, (start, end) in zip(out, bounds, strict=True):
                piece.append(data[start * width:end * width])
            continue
        values = ordered.tolist()
        text = _SEPARATOR.join(values)
        if text.count(_SEPARATOR) != max(len(values) - 1, 0):
            return None
        # value i is text[at[i]:at[i + 1] - 1]
        at = np.zeros(len(values) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, values), np.int64, len(values)) + 1, out=at[1:])
        offsets = at.tolist()
        for piece, (start, end) in zip(out, bounds, strict=True):
            piece.append(text[offsets[start]:offsets[end] - 1] if end > start else "")
    return out


def pack(events: EventColumns) -> bytes:
    """A batch as bytes (`unpack` gives it back)."""
    return pickle.dumps(packed_parts(events), 5)


def merged_parts(parts: Sequence[PackedParts]) -> PackedParts:
    """Several batches in packed form as one, each kind's rows in the order given, without
    unpacking them (numbers' bytes and strings' texts are joined)."""
    if len(parts) == 1:
        return parts[0]
    touches = [p[2] for p in parts if p[0]] or [parts[0][2]]
    orders = [p[3] for p in parts if p[1]] or [parts[0][3]]
    return (sum(p[0] for p in parts), sum(p[1] for p in parts),
            [_merged_column([columns[i] for columns in touches])
             for i in range(len(parts[0][2]))],
            [_merged_column([columns[i] for columns in orders])
             for i in range(len(parts[0][3]))])


def _merged_column(kept: list[bytes | str | list[str]]) -> bytes | str | list[str]:
    """The columns of batches with rows, joined (a batch per merged part)."""
    if len(kept) == 1:
        return kept[0]
    try:  # the common case: all numbers' bytes, or all joined texts
        if isinstance(kept[0], bytes):
            return b"".join(kept)  # type: ignore[arg-type]
        if isinstance(kept[0], str):
            return _SEPARATOR.join(kept)  # type: ignore[arg-type]
    except TypeError:
        pass  # a batch packed a column as a list (a value held the separator)
    values: list[str] = []  # a value held the separator: as lists
    for column in kept:
        if isinstance(column, bytes):
            raise TypeError("a column packed as numbers in one batch and strings in another")
        values += column.split(_SEPARATOR) if isinstance(column, str) else column
    return values


def unpack(data: bytes) -> EventColumns:
    n_touches, n_orders, touches, orders = pickle.loads(data)
    return EventColumns(TouchColumns(*_unpacked(TouchColumns, touches, n_touches)),
                        OrderColumns(*_unpacked(OrderColumns, orders, n_orders)))


def _unpacked(kind: type, columns: list, rows: int) -> list[np.ndarray]:
    names = kind._fields  # type: ignore[attr-defined]
    return [_unpack_column(packed, _DTYPES.get(name, object), rows)
            for name, packed in zip(names, columns, strict=True)]


def order_rows_of_parts(parts: tuple) -> list[tuple]:
    """The orders of a batch in `pack`'s form before pickling (the decoder's scanner makes
    that form), as tuples in Conversion's field order, without unpacking its touches."""
    _, n_orders, _, orders = parts
    return order_rows(OrderColumns(*_unpacked(OrderColumns, orders, n_orders))) \
        if n_orders else []


def order_rows(orders: OrderColumns) -> list[tuple]:
    """Orders as tuples in Conversion's field order."""
    return list(zip(*(column.tolist() for column in orders), strict=True))


def without_orders(events: EventColumns, copies: Counter[tuple]) -> EventColumns | None:
    """The batch without these order copies (rows in Conversion's field order), each taken
    as many times as counted; `copies` is counted down by what was taken. None: none of
    them is in the batch."""
    if not len(events.orders.ts_ms):
        return None
    keep = np.ones(len(events.orders.ts_ms), bool)
    for at, row in enumerate(order_rows(events.orders)):
        if copies.get(row, 0) > 0:
            copies[row] -= 1
            keep[at] = False
    if keep.all():
        return None
    return EventColumns(events.touches, take(events.orders, keep))
