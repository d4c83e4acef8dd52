"""Order changes from an orders table's change stream (udfs/orders): Debezium's change
events (create, snapshot read, update, delete, tombstone) and plain rows, read by the
table's mapping; what a refund, a cancellation or a changed amount becomes; and the
errors a bad message or mapping gets (naming the column, the file, line and field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from udfs.orders import (
    CORRECTED,
    DELETED,
    IGNORED,
    PLACED,
    REFUNDED,
    OrderChangeError,
    OrderMappingError,
    decode_order_change,
    load_order_mapping,
    parse_order_mapping,
)

SHIPPED = Path(__file__).resolve().parents[2] / "jobs" / "config" / "order_changes.yaml"
MAPPING = load_order_mapping(SHIPPED)
CREATED = "2026-11-02T10:15:00Z"
CREATED_MS = 1_793_614_500_000


def row(**changes: Any) -> dict[str, Any]:
    base = {"id": 1001, "customer_id": "u-42", "total_cents": 12_950, "refunded_cents": 0,
            "currency": "eur", "status": "paid", "created_at": CREATED}
    return {**base, **changes}


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
          table: str = "orders", wrapped: bool = True) -> bytes:
    payload = {"op": op, "before": before, "after": after, "ts_ms": 1_794_200_000_123,
               "source": {"connector": "postgresql", "db": "shop", "schema": "shop",
                          "table": table, "ts_ms": 1_794_200_000_000}}
    return orjson.dumps({"schema": {"type": "struct"}, "payload": payload} if wrapped
                        else payload)


def test_a_created_order_is_placed_with_its_revenue_currency_and_time():
    change = decode_order_change(event("c", None, row()), MAPPING)
    assert change.kind == PLACED
    assert (change.order_id, change.user_id, change.currency) == ("1001", "u-42", "EUR")
    assert change.revenue == pytest.approx(129.50)
    assert change.ts_ms == CREATED_MS and change.changed_ms == 1_794_200_000_000
    # the snapshot's read of a row, and an event without the schema wrapper: the same
    assert decode_order_change(event("r", None, row(), wrapped=False), MAPPING).kind == PLACED


def test_a_changed_amount_corrects_the_revenue_from_what_it_was():
    change = decode_order_change(event("u", row(), row(total_cents=9_950)), MAPPING)
    assert change.kind == CORRECTED
    assert (change.previous, change.revenue) == (pytest.approx(129.5), pytest.approx(99.5))


def test_a_partial_refund_corrects_and_a_full_one_or_a_cancellation_withdraws():
    partial = decode_order_change(event("u", row(), row(refunded_cents=2_950)), MAPPING)
    assert partial.kind == CORRECTED and partial.revenue == pytest.approx(100.0)
    full = decode_order_change(event("u", row(), row(refunded_cents=12_950)), MAPPING)
    assert full.kind == REFUNDED and full.revenue == 0.0
    assert full.previous == pytest.approx(129.5)
    cancelled = decode_order_change(event("u", row(), row(status="CANCELLED")), MAPPING)
    assert cancelled.kind == REFUNDED and cancelled.revenue == 0.0
    assert "'paid' -> 'cancelled'" in cancelled.why
    # a cancelled order updated again stays withdrawn; reinstated, it counts again
    again = decode_order_change(event("u", row(status="cancelled"),
                                      row(status="cancelled", total_cents=1)), MAPPING)
    assert again.kind == IGNORED
    back = decode_order_change(event("u", row(status="cancelled"), row()), MAPPING)
    assert back.kind == CORRECTED and back.revenue == pytest.approx(129.5)
    assert "reinstated" in back.why


def test_a_delete_withdraws_and_its_tombstone_is_nothing():
    deleted = decode_order_change(event("d", row(), None), MAPPING)
    assert deleted.kind == DELETED and deleted.revenue == 0.0
    assert deleted.previous == pytest.approx(129.5) and deleted.order_id == "1001"
    assert decode_order_change(None, MAPPING).kind == IGNORED
    assert decode_order_change(b"", MAPPING).kind == IGNORED


def test_updates_without_a_before_image_or_of_nothing_that_counts():
    no_before = decode_order_change(event("u", None, row(total_cents=100)), MAPPING)
    assert no_before.kind == PLACED and no_before.revenue == pytest.approx(1.0)
    assert "REPLICA IDENTITY FULL" in no_before.why
    address = decode_order_change(event("u", row(), row(shipping="Main St 1")), MAPPING)
    assert address.kind == IGNORED
    other = decode_order_change(event("c", None, row(), table="carts"), MAPPING)
    assert other.kind == IGNORED and "shop.carts" in other.why


def test_plain_rows_and_the_unwrapped_delete_marker():
    plain = parse_order_mapping("format: json\ncolumns: {order_id: id, user_id: user, "
                                "revenue: amount, ts: placed_at}\n")
    placed = decode_order_change(orjson.dumps({"id": "o-1", "user": "u-1", "amount": "12.5",
                                               "placed_at": 1_793_614_500_000_000}), plain)
    assert placed.kind == PLACED and placed.revenue == 12.5
    assert placed.ts_ms == CREATED_MS  # microseconds, told apart by size
    assert placed.currency == "USD"
    gone = decode_order_change(orjson.dumps({"id": "o-1", "user": "u-1", "amount": 12.5,
                                             "__deleted": "true"}), plain)
    assert gone.kind == DELETED and gone.previous == 12.5


@pytest.mark.parametrize(("message", "says"), [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "JSON object, not list"),
    (orjson.dumps({"before": None, "after": {}}), "no `op`"),
    (event("x", None, row()), "`op` is 'x'"),
    (event("c", None, None), "without `after`"),
    (event("c", None, row(customer_id="")), "no user_id: column `customer_id`"),
    (event("c", None, row(total_cents="MTIzNDU=")), "decimal.handling.mode"),
    (event("c", None, row(total_cents=-5)), "not negative"),
    (event("c", None, row(created_at="2026-11-02 10:15:00")), "without its zone"),
])
def test_a_message_that_is_no_order_change_says_why(message: bytes, says: str):
    with pytest.raises(OrderChangeError, match=says.replace("(", r"\(").replace("[", r"\[")):
        decode_order_change(message, MAPPING)


@pytest.mark.parametrize(("text", "says"), [
    ("columns: [id]\n", "line 1, `columns`: must be a mapping"),
    ("format: avro\ncolumns: {order_id: id}\n", "line 1, `format`: 'avro' is not one of"),
    ("columns:\n  order_id: id\n  user_id: u\n", "names no column for revenue"),
    ("columns:\n  order_id: id\n  buyer: u\n", "line 3, `columns.buyer`: not a field"),
    ("colums: {}\n", "line 1: unknown key 'colums'"),
    ("columns: {order_id: id, user_id: u, revenue: r}\nrevenue_scale: 0\n",
     "line 2, `revenue_scale`: must be a positive number"),
    ("columns: {order_id: id, user_id: u, revenue: r}\ndefault_currency: euro\n",
     "three-letter"),
    ("description: [\n", "not valid YAML"),
])
def test_a_mapping_that_cannot_be_used_names_the_line_and_field(text: str, says: str):
    with pytest.raises(OrderMappingError, match=says.replace("(", r"\(").replace("[", r"\[")):
        parse_order_mapping(text, "orders.yaml")


def test_the_shipped_mapping_reads_what_its_comment_describes():
    assert MAPPING.format == "debezium" and MAPPING.table == "shop.orders"
    assert MAPPING.column("refunded") == "refunded_cents" and MAPPING.revenue_scale == 0.01
    with pytest.raises(OrderMappingError, match="order mapping file not found"):
        load_order_mapping(SHIPPED.with_name("missing.yaml"))


def test_a_mapping_file_that_cannot_be_read_says_why(tmp_path: Path):
    latin = tmp_path / "orders.yaml"
    latin.write_bytes("columns: {order_id: n\u00famero}\n".encode("latin-1"))
    with pytest.raises(OrderMappingError,
                       match=r"orders.yaml: not a text file \(byte 21 is not UTF-8\)"):
        load_order_mapping(latin)
    with pytest.raises(OrderMappingError, match="cannot read it: Is a directory"):
        load_order_mapping(tmp_path)
