"""A sink per warehouse table, and one per result topic (the model: a sink is `write(batch)`).

`TableSink` writes rows of one schemas/rows.py declaration: upserted by the row's key,
withdrawn keys deleted; `KeyGroupSink` replaces whole groups of keys (a conversion's
credits under a model, an experiment's results for a window, a model's credit intervals
for a day); `EarliestSink` keeps the earliest row per key (a user's first exposure).
The topic sinks turn a batch of a result topic's messages into those tables' rows; the
loader (pipelines/store/loading.py) calls them inside the transaction that stores the
Kafka offsets, so rows and offsets commit together.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from pipelines.codec import credit_messages, gpu_cost_messages, roi_messages, table_messages
from pipelines.sources.ad_spend import SpendError
from pipelines.sources.ad_spend import parse_message as parse_spend
from pipelines.store.warehouse import Warehouse
from schemas import rows
from schemas.rows import Row
from udfs.periods import day_of

Rows = list[tuple[object, ...]]
_CASTS: dict[str, Callable[[Any], Any]] = {"bigint": int, "double": float}
_CREDIT_CASTS = [(c.name, _CASTS.get(c.type)) for c in rows.ATTRIBUTION_CREDITS.columns]


def credit_rows(message: bytes) -> Rows:
    """A credits-topic message (a JSON table of rows) -> rows of attribution_credits."""
    return [credit_row(data) for data in credit_messages.decode(message)]


def credit_row(data: dict[str, Any]) -> tuple[object, ...]:
    """A credit row (rows.CREDIT, as a dict) -> a row of attribution_credits."""
    values = {**data, "stage": data.get("stage", "unknown"),
              "conversion_date": day_of(data["conversion_ts_ms"])}
    return tuple(cast(values[name]) if cast else values[name] for name, cast in _CREDIT_CASTS)


def last_per_key(rows: Rows, keys: int) -> Rows:
    """One row per key, the last one (a batch may hold a key twice; one statement can't)."""
    return list({row[:keys]: row for row in rows}.values())


def plain_rows(row: Row, frame: pd.DataFrame) -> list[tuple[object, ...]]:
    """The frame's rows in `row`'s column order as plain Python values (numpy numbers to
    int and float, NaN and missing values to None)."""
    columns = [(frame[c.name].tolist(), c.type) for c in row.columns]
    return [tuple(_plain(values[i], kind) for values, kind in columns)
            for i in range(len(frame))]


def _plain(value: Any, kind: str) -> object:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if kind == "double":
        return float(value)
    if kind == "bigint":
        return int(value)
    if kind == "boolean":
        return bool(value)
    return str(value)



class TableSink:
    """One declared table: `write(batch)` upserts the rows by the row's key."""

    def __init__(self, warehouse: Warehouse, row: Row) -> None:
        self.warehouse, self.row = warehouse, row

    def write(self, batch: Rows) -> None:
        self.warehouse.store(self.row, batch)

    def replace_all(self, batch: Rows) -> int:
        """Replace the whole table by `batch`, in one transaction (a reader sees the old
        table or the new one); the number of rows."""
        with self.warehouse.transaction():
            self.warehouse.execute(f"DELETE FROM {self.row.table}")
            if batch:
                self.write(batch)
        return len(batch)

    def replace_where(self, column: str, value: object, batch: Rows) -> None:
        """Replace the rows whose `column` holds `value` (a day's partition) by `batch`,
        inserted: a key given twice is an error."""
        with self.warehouse.transaction():
            self.warehouse.delete(self.row, (column,), (value,))
            if batch:
                self.warehouse.insert(self.row, batch)

    def withdraw(self, keys: Rows) -> None:
        """Delete the rows of these keys (the key columns' values)."""
        self._delete(self.row.key, keys)

    def _delete(self, columns: tuple[str, ...], values: Rows) -> None:
        """Delete the rows whose `columns` hold one of `values`."""
        self.warehouse.executemany(f"DELETE FROM {self.row.table} WHERE "
                                   + " AND ".join(f"{c} = ?" for c in columns), values)


class KeyGroupSink(TableSink):
    """A table whose rows are replaced a group at a time: `group` names some of the key
    columns, and `write_groups(groups)` replaces the rows holding a group's values in them
    by the group's rows, in one transaction (a group may shrink)."""

    def __init__(self, warehouse: Warehouse, row: Row, group: tuple[str, ...]) -> None:
        super().__init__(warehouse, row)
        if not group or not set(group) <= set(row.key):
            raise ValueError(f"{row.table}: a group is some of the key columns {row.key}, "
                             f"not {group}")
        self.group = group

    def write_groups(self, groups: dict[tuple[object, ...], Rows]) -> None:
        with self.warehouse.transaction():
            self._delete(self.group, list(groups))
            self.write([values for group in groups.values() for values in group])

    def replace(self, batch: Rows) -> None:
        """Replace each group of the batch's rows by those rows."""
        at = [self.row.names.index(column) for column in self.group]
        groups: dict[tuple[object, ...], Rows] = {}
        for values in batch:
            groups.setdefault(tuple(values[i] for i in at), []).append(values)
        self.write_groups(groups)


class EarliestSink(TableSink):
    """`write(batch)` keeps per key the row with the smallest `column`: a later row never
    replaces an earlier one."""

    def __init__(self, warehouse: Warehouse, row: Row, column: str) -> None:
        super().__init__(warehouse, row)
        self.column = column

    def write(self, batch: Rows) -> None:
        names, keys, table = self.row.names, len(self.row.key), self.row.table
        self.warehouse.executemany(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES "
            f"({', '.join('?' for _ in names)}) ON CONFLICT ({', '.join(names[:keys])}) DO "
            f"UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in names[keys:])} WHERE "
            f"excluded.{self.column} < {table}.{self.column}", batch)


# -- the result topics ----------------------------------------------------------------------
class ConversionsSink:
    """The conversions topic: each order's latest row (a correction or a change to the
    order, a refund, reports it again: every version of one order is in one partition, in
    order)."""

    NAMES = rows.CONVERSIONS_TABLE.names

    def __init__(self, warehouse: Warehouse) -> None:
        self.conversions = TableSink(warehouse, rows.CONVERSIONS_TABLE)

    def write(self, messages: list[bytes]) -> None:
        latest: dict[str, tuple[object, ...]] = {}
        for message in messages:
            for data in table_messages.decode(message):
                values = {**data, "conversion_date": day_of(int(data["conversion_ts_ms"]))}
                latest[data["order_id"]] = tuple(values[name] for name in self.NAMES)
        if latest:
            self.conversions.write(list(latest.values()))


class CreditsSink:
    """The credits topic: a conversion's rows under a model replace all it had (pipelines/
    codec/credit_messages.py): of a batch, the last message's rows per (model, order_id)."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.credits = KeyGroupSink(warehouse, rows.ATTRIBUTION_CREDITS, ("model", "order_id"))

    def write(self, messages: list[bytes]) -> None:
        self.credits.write_groups(
            {key: [credit_row(row) for row in group]
             for key, group in credit_messages.latest_groups(messages).items()})

    def replace_day(self, day: str, credits: Rows) -> None:
        """The backfill's day (pipelines/store/backfill.py): the credits of the orders of
        `day` replaced by `credits`."""
        self.credits.replace_where("conversion_date", day, credits)


class GpuCostsSink:
    """The gpu_costs topic: kind call and idle rows (the rest, e.g. unobserved, skipped)."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.calls = TableSink(warehouse, rows.GPU_CALL_COST)
        self.idle = TableSink(warehouse, rows.GPU_IDLE_COST)

    def write(self, messages: list[bytes]) -> None:
        found: dict[str, Rows] = {gpu_cost_messages.CALL: [], gpu_cost_messages.IDLE: []}
        for value in messages:
            message = gpu_cost_messages.decode(value)  # pipelines/codec/gpu_cost_messages.py
            if message.kind in found:
                found[message.kind].append(gpu_cost_messages.row(message))
        calls, idle = found[gpu_cost_messages.CALL], found[gpu_cost_messages.IDLE]
        self.calls.write(calls)
        self.idle.write(idle)


class RoiSink:
    """The ROI topic: roi_daily, roi_unallocated, order_costs and order_segments rows, and
    the days the job has closed (roi_days_closed); a day reported again within one batch:
    the later row wins, as in the topic."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.roi = TableSink(warehouse, rows.ROI_DAILY)
        self.unallocated = TableSink(warehouse, rows.ROI_UNALLOCATED)
        self.orders = TableSink(warehouse, rows.ORDER_COST)
        self.segments = TableSink(warehouse, rows.ORDER_SEGMENT)
        self.closed = TableSink(warehouse, rows.ROI_DAY_CLOSED)

    def write(self, messages: list[bytes]) -> None:
        found: dict[str, Rows] = {kind: [] for kind in roi_messages.ROWS}
        for value in messages:
            message = roi_messages.decode(value)  # pipelines/codec/roi_messages.py
            if message.kind in found:
                found[message.kind].append(
                    (*roi_messages.row(message), message.withdrawn)
                    if message.kind == roi_messages.ROI else roi_messages.row(message))
        roi, unallocated, orders, segments, closed = (found[kind] for kind in (
            roi_messages.ROI, roi_messages.UNALLOCATED, roi_messages.ORDER_COST,
            roi_messages.ORDER_SEGMENT, roi_messages.DAY_CLOSED))
        self.orders.write(last_per_key(orders, len(rows.ORDER_COST.key)))
        self.segments.write(last_per_key(segments, len(rows.ORDER_SEGMENT.key)))
        self.closed.write(last_per_key(closed, len(rows.ROI_DAY_CLOSED.key)))
        # a withdrawn key (no credit left there after a correction) is deleted
        keys = len(rows.ROI_DAILY.key)
        latest_roi = last_per_key(roi, keys)
        self.roi.write([row[:-1] for row in latest_roi if not row[-1]])
        self.roi.withdraw([row[:keys] for row in latest_roi if row[-1]])
        keys = len(rows.ROI_UNALLOCATED.key)
        amount = rows.ROI_UNALLOCATED.names.index("amount")
        latest = last_per_key(unallocated, keys)
        self.unallocated.write([row for row in latest if row[amount] != 0])
        # amount 0: a day reported again withdrew that key (its cost found a conversion)
        self.unallocated.withdraw([row[:keys] for row in latest if row[amount] == 0])

    def replace_day(self, day: str, roi: Rows, unallocated: Rows, orders: Rows,
                    segments: Rows | None = None) -> None:
        """The backfill's day (pipelines/store/backfill.py): the day's rows of roi_daily,
        roi_unallocated and order_costs replaced by these; of order_segments too unless
        `segments` is None."""
        for sink, batch in ((self.orders, orders), (self.roi, roi),
                            (self.unallocated, unallocated)):
            sink.replace_where("day", day, batch)
        if segments is not None:
            self.segments.replace_where("day", day, segments)


class SpendSink:
    """The ad_spend topic as the ROI job used it: invalid records and other currencies
    (which it dead-letters) are left out."""

    def __init__(self, warehouse: Warehouse, currency: str) -> None:
        self.spend = TableSink(warehouse, rows.AD_SPEND)
        self.currency = currency

    def write(self, messages: list[bytes]) -> None:
        spend = []
        for message in messages:
            try:
                record = parse_spend(message)
            except SpendError:
                continue
            if record.currency == self.currency:
                spend.append(tuple(getattr(record, c) for c in rows.AD_SPEND.names))
        self.spend.write(last_per_key(spend, len(rows.AD_SPEND.key)))


class ExperimentsSink:
    """Either experiments topic: exposure rows and conversion rows, told by their fields;
    a user's FIRST exposure is the one kept: a later row for the same user and flag (the
    job forgot them after its retention and saw them again) never replaces it."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.exposures = EarliestSink(warehouse, rows.EXPERIMENT_EXPOSURE, "first_exposure_ms")
        self.conversions = TableSink(warehouse, rows.EXPERIMENT_CONVERSION)

    def write(self, messages: list[bytes]) -> None:
        exposures, conversions = [], []
        for message in messages:
            row = json.loads(message)
            if "order_id" in row:
                conversions.append(tuple(row[c] for c in rows.EXPERIMENT_CONVERSION.names))
            else:
                exposures.append(tuple(row[c] for c in rows.EXPERIMENT_EXPOSURE.names))
        first = rows.EXPERIMENT_EXPOSURE.names.index("first_exposure_ms")
        newest_first = sorted(exposures, key=lambda r: -int(str(r[first])))
        self.exposures.write(last_per_key(newest_first, len(rows.EXPERIMENT_EXPOSURE.key)))
        self.conversions.write(last_per_key(conversions,
                                            len(rows.EXPERIMENT_CONVERSION.key)))


class CustomerLtvSink:
    """customer_ltv's one writer, keyed by user_id: a customer's row is its latest score.
    `write`, the customer_ltv topic (the ltv job's, pipelines/flink/ltv/job.py): a
    customer's row replaces the one it had; of a batch, the last row per customer, as in
    the topic (a customer's rows are keyed by it: all in one partition, in order).
    `replace_all`, a batch refresh (pipelines/ltv/report.py): every customer scored as of
    one day replaces the whole table; the stream's later scores replace its rows again."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.customers = TableSink(warehouse, rows.CUSTOMER_LTV)

    def write(self, messages: list[bytes]) -> None:
        found = [tuple(row[c] for c in rows.CUSTOMER_LTV.names)
                 for message in messages for row in table_messages.decode(message)]
        self.customers.write(last_per_key(found, len(rows.CUSTOMER_LTV.key)))

    def replace_all(self, batch: Rows) -> int:
        return self.customers.replace_all(batch)
