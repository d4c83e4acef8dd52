"""Orders from the orders table's change stream: what each change event says of an order
(placed, its revenue corrected, refunded or cancelled, deleted), read by a small mapping
of the table's columns (mapping.py, changes.py)."""

from udfs.orders.changes import (
    CORRECTED,
    DELETED,
    IGNORED,
    KINDS,
    PLACED,
    REFUNDED,
    OrderChange,
    OrderChangeError,
    decode_order_change,
)
from udfs.orders.mapping import (
    OrderMapping,
    OrderMappingError,
    load_order_mapping,
    parse_order_mapping,
)

__all__ = [
    "CORRECTED",
    "DELETED",
    "IGNORED",
    "KINDS",
    "PLACED",
    "REFUNDED",
    "OrderChange",
    "OrderChangeError",
    "OrderMapping",
    "OrderMappingError",
    "decode_order_change",
    "load_order_mapping",
    "parse_order_mapping",
]
