"""Orders from the orders table's change stream: what each change event says of an order
(placed, its revenue corrected, refunded or cancelled, deleted), read by a small mapping
of the table's columns (mapping.py, changes.py); what a change does to what was reported of
the order (revisions.py)."""

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
from udfs.orders.revisions import (
    A_REVISION,
    AN_ORDER,
    CONVERSION_REVENUE,
    OLD_ROW,
    TOO_OLD,
    OrderRevision,
    credits_by_order,
    order_revenue,
    packed_credits,
    revised_conversion,
    revised_credits,
    route,
    supersedes,
    unpacked_credits,
)

__all__ = [
    "AN_ORDER",
    "A_REVISION",
    "CONVERSION_REVENUE",
    "CORRECTED",
    "DELETED",
    "IGNORED",
    "KINDS",
    "OLD_ROW",
    "PLACED",
    "REFUNDED",
    "TOO_OLD",
    "OrderChange",
    "OrderChangeError",
    "OrderMapping",
    "OrderMappingError",
    "OrderRevision",
    "credits_by_order",
    "decode_order_change",
    "load_order_mapping",
    "order_revenue",
    "packed_credits",
    "parse_order_mapping",
    "revised_conversion",
    "revised_credits",
    "route",
    "supersedes",
    "unpacked_credits",
]
