"""What one message of an orders table's change stream says about an order: placed (or
as it is now), its revenue corrected, refunded or cancelled, deleted, or nothing that
counts, decoded by the table's mapping (mapping.py).

Two forms are read. `debezium`: Debezium's change event, with or without its schema
wrapper ({"schema", "payload"}): `op` c (create), r (a snapshot's read), u (update), d
(delete), the row `before` and `after`, `source` (database, schema, table, ts_ms). A
null value is the tombstone after a delete (for log compaction): nothing. `json`: the
row itself, one message per write of it (a plain orders topic, or Debezium's
ExtractNewRecordState, whose `__deleted: "true"` marks a delete).

Revenue is the amount column times `revenue_scale`, less the refunded column where the
mapping names one; an order whose status is one of `refund_statuses` has none left.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from udfs.orders.mapping import OrderMapping

PLACED = "order"  # the order as it is now: new, or no before-image to compare
CORRECTED = "correction"  # its revenue changed (an amount changed, a partial refund)
REFUNDED = "refund"  # withdrawn: a refund or cancellation status, or nothing left
DELETED = "delete"  # the row deleted: withdrawn
IGNORED = "ignored"  # a tombstone, another table, an update of nothing that counts
KINDS = (PLACED, CORRECTED, REFUNDED, DELETED, IGNORED)

_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


class OrderChangeError(ValueError):
    """A message that cannot be read as an order change: the reason a dead letter gets."""


@dataclass(frozen=True)
class OrderChange:
    kind: str  # one of KINDS
    order_id: str = ""
    user_id: str = ""
    ts_ms: int = 0  # when the order was placed (the mapping's `ts`; else the change's)
    changed_ms: int = 0  # when the change happened (the database's commit time)
    revenue: float = 0.0  # the order's revenue after the change (0 when withdrawn)
    previous: float | None = None  # before it, where the message says
    currency: str = ""
    status: str = ""
    why: str = ""  # what decided the kind, in words


def decode_order_change(value: bytes | str | None, mapping: OrderMapping) -> OrderChange:
    """One message of the change stream, or an OrderChangeError saying why not."""
    if value is None or value in (b"", ""):
        return OrderChange(IGNORED, why="a tombstone (the null value after a delete)")
    try:
        message = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise OrderChangeError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise OrderChangeError(f"a change event is a JSON object, not {type(message).__name__}")
    if mapping.format == "json":
        return _plain_row(message, mapping)
    # with the JSON converter's schemas on, the event is the `payload` beside its `schema`
    payload = message["payload"] if "payload" in message and "op" not in message else message
    if payload is None:
        return OrderChange(IGNORED, why="a tombstone (the null payload after a delete)")
    if not isinstance(payload, dict) or "op" not in payload:
        raise OrderChangeError("not a Debezium change event: no `op` (c, r, u or d); for "
                               "rows without the envelope set `format: json`")
    table = _table_of(payload.get("source"))
    if mapping.table and table and not _same_table(mapping.table, table):
        return OrderChange(IGNORED, why=f"another table ({table})")
    changed = _epoch_ms(_first(payload.get("source"), "ts_ms", payload.get("ts_ms")),
                        "source.ts_ms")
    op, before, after = payload["op"], payload.get("before"), payload.get("after")
    if op in ("c", "r"):
        row = _row(after, "after", op)
        return _state(row, mapping, changed, None, "created" if op == "c" else
                      "read by the snapshot")
    if op == "d":
        row = _row(before, "before", op)
        state = _state(row, mapping, changed, None, "")
        return OrderChange(DELETED, state.order_id, state.user_id, state.ts_ms, changed, 0.0,
                           state.revenue, state.currency, state.status,
                           "the row was deleted: the order is withdrawn")
    if op == "u":
        row = _row(after, "after", op)
        if before is None:
            return _state(row, mapping, changed, None,
                          "updated, no before-image (PostgreSQL: REPLICA IDENTITY FULL "
                          "gives one): the order as it is now")
        old = _state(_row(before, "before", op), mapping, changed, None, "")
        return _state(row, mapping, changed, old, "")
    raise OrderChangeError(f"`op` is {op!r}: not c, r, u or d")


def _plain_row(row: dict[str, Any], mapping: OrderMapping) -> OrderChange:
    deleted = str(row.get("__deleted", "")).lower() == "true"
    changed = _epoch_ms(row["__source_ts_ms"], "__source_ts_ms") \
        if row.get("__source_ts_ms") is not None else 0
    state = _state(row, mapping, changed, None, "a row of the orders topic: the order as "
                                                "it is now")
    if deleted:
        return OrderChange(DELETED, state.order_id, state.user_id, state.ts_ms,
                           state.changed_ms, 0.0, state.revenue, state.currency,
                           state.status, "the row was deleted (`__deleted`): withdrawn")
    return state


def _state(row: dict[str, Any], mapping: OrderMapping, changed: int,
           old: OrderChange | None, why: str) -> OrderChange:
    """The order a row describes; with `old` (the row before an update), what changed."""
    order_id = _required_text(row, mapping, "order_id")
    user_id = _required_text(row, mapping, "user_id")
    amount = _number(row, mapping, "revenue")
    refunded = _number(row, mapping, "refunded") if mapping.column("refunded") else 0.0
    # rounded past any currency's minor unit: 2390 cents x 0.01 is 23.9, not 23.900000000000002
    revenue = round((amount - refunded) * mapping.revenue_scale, 9)
    status = _optional_text(row, mapping.column("status")).lower()
    currency = (_optional_text(row, mapping.column("currency")) or
                mapping.default_currency).upper()
    ts_column = mapping.column("ts")
    ts_ms = _epoch_ms(row.get(ts_column), f"`{ts_column}`") \
        if ts_column and row.get(ts_column) is not None else changed
    withdrawn = status in mapping.refund_statuses
    if old is None:
        if withdrawn:
            return OrderChange(REFUNDED, order_id, user_id, ts_ms, changed, 0.0, None,
                               currency, status, f"status {status!r} withdraws it")
        return OrderChange(PLACED, order_id, user_id, ts_ms, changed, revenue, None,
                           currency, status, why)
    if withdrawn and old.status not in mapping.refund_statuses:
        return OrderChange(REFUNDED, order_id, user_id, ts_ms, changed, 0.0, old.revenue,
                           currency, status, f"status {old.status!r} -> {status!r}: "
                                             "withdrawn")
    if withdrawn:
        return OrderChange(IGNORED, order_id, user_id, ts_ms, changed, 0.0, 0.0, currency,
                           status, f"status {status!r}: withdrawn already")
    if not math.isclose(revenue, old.revenue, rel_tol=0.0, abs_tol=1e-9):
        kind = REFUNDED if revenue <= 0.0 < old.revenue else CORRECTED
        return OrderChange(kind, order_id, user_id, ts_ms, changed, max(revenue, 0.0),
                           old.revenue, currency, status,
                           f"revenue {old.revenue:g} -> {revenue:g}" +
                           (f" (status {old.status!r} -> {status!r}: reinstated)"
                            if old.status in mapping.refund_statuses else ""))
    if old.user_id != user_id or old.order_id != order_id:
        return OrderChange(CORRECTED, order_id, user_id, ts_ms, changed, revenue,
                           old.revenue, currency, status, "its user or id changed")
    return OrderChange(IGNORED, order_id, user_id, ts_ms, changed, revenue, old.revenue,
                       currency, status, "updated, but nothing that counts changed")


def _row(value: Any, name: str, op: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OrderChangeError(f"`op` {op!r} without `{name}`: the row is missing")
    return value


def _required_text(row: dict[str, Any], mapping: OrderMapping, field: str) -> str:
    column = mapping.column(field)
    text = _optional_text(row, column)
    if not text:
        raise OrderChangeError(f"no {field}: column `{column}` is missing or empty")
    return text


def _optional_text(row: dict[str, Any], column: str) -> str:
    value = row.get(column) if column else None
    if value is None or isinstance(value, dict | list):
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _number(row: dict[str, Any], mapping: OrderMapping, field: str) -> float:
    column = mapping.column(field)
    value = row.get(column)
    if isinstance(value, bool):
        raise OrderChangeError(f"{field}: column `{column}` is a boolean, not an amount")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            hint = " (Debezium's precise decimals come as base64 bytes: set the " \
                   "connector's decimal.handling.mode to string or double)" \
                if _BASE64.match(value) else ""
            raise OrderChangeError(f"{field}: column `{column}` is {value!r}, not a "
                                   f"number{hint}") from None
    elif value is None:
        raise OrderChangeError(f"{field}: column `{column}` is missing or null")
    else:
        raise OrderChangeError(f"{field}: column `{column}` is {type(value).__name__}, "
                               "not a number")
    if not math.isfinite(number) or number < 0:
        raise OrderChangeError(f"{field}: column `{column}` is {value!r}: an amount is a "
                               "finite number, not negative")
    return number


def _epoch_ms(value: Any, name: str) -> int:
    """Epoch milliseconds of a timestamp: a number in s, ms, µs or ns (told apart by size,
    as Debezium sends TIMESTAMP columns in µs by default) or an ISO 8601 text."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise OrderChangeError(f"{name} is a boolean, not a time")
    if isinstance(value, int | float):
        magnitude = abs(value)
        divisor = 1e6 if magnitude >= 1e17 else 1e3 if magnitude >= 1e14 else \
            1.0 if magnitude >= 1e11 else 1e-3
        return int(value / divisor)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise OrderChangeError(f"{name} is {value!r}: not an epoch number or ISO 8601 "
                                   "time") from None
        if moment.tzinfo is None:
            raise OrderChangeError(f"{name} is {value!r}: a time without its zone (give "
                                   "UTC, e.g. a trailing Z)")
        return int(moment.timestamp() * 1000)
    raise OrderChangeError(f"{name} is {type(value).__name__}, not a time")


def _first(mapping: Any, key: str, default: Any) -> Any:
    return mapping.get(key, default) if isinstance(mapping, dict) else default


def _table_of(source: Any) -> str:
    if not isinstance(source, dict) or not source.get("table"):
        return ""
    schema = source.get("schema") or source.get("db") or ""
    return f"{schema}.{source['table']}" if schema else str(source["table"])


def _same_table(wanted: str, seen: str) -> bool:
    return wanted == seen or "." not in wanted and seen.rsplit(".", 1)[-1] == wanted
