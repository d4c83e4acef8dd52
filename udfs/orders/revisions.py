"""What a change to an order (its amount corrected, refunded, cancelled, deleted) does to
what was reported of it: the conversion row and every credit row again, the revenue the
order has now in place of the one it had. The credit shares stay as they are: the buyer
still bought, after the same touches; only the money changed.

A revision names the order's revenue after the change, not a difference, so the newest
one wins whatever came before it (`supersedes`), and applying one twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from schemas import rows
from udfs.orders.changes import PLACED

CREDIT_SHARE = rows.CREDIT.names.index("credit")
CREDIT_REVENUE = rows.CREDIT.names.index("revenue")
CREDIT_ORDER = rows.CREDIT.names.index("order_id")
CONVERSION_REVENUE = rows.CONVERSION.names.index("revenue")
CONVERSION_ORDER = rows.CONVERSION.names.index("order_id")


class OrderRevision(NamedTuple):
    """An order's revenue after a change of it (udfs.orders.changes.OrderChange)."""

    order_id: str
    user_id: str
    revenue: float  # net of refunds; 0 when refunded, cancelled or deleted
    order_ts_ms: int  # when the order was placed
    changed_ms: int  # when it changed (the database's commit time; 0: unknown)
    kind: str  # correction, refund, delete, or order (a copy from the table, as it is now)


def supersedes(revision: OrderRevision, known: tuple[float, int] | None) -> bool:
    """True when `revision` is at least as new as the (revenue, changed_ms) kept: a change
    that comes after a newer one of the same order says what no longer holds."""
    return known is None or revision.changed_ms >= known[1]


def revised_credits(credits: Iterable[Sequence[Any]], revenue: float) -> list[tuple]:
    """Credit rows with the order's revenue now: each touch's share of it."""
    return [(*row[:CREDIT_REVENUE], row[CREDIT_SHARE] * revenue, *row[CREDIT_REVENUE + 1:])
            for row in credits]


def revised_conversion(conversion: Sequence[Any], revenue: float) -> tuple:
    return (*conversion[:CONVERSION_REVENUE], revenue, *conversion[CONVERSION_REVENUE + 1:])


def credits_by_order(credits: Iterable[Sequence[Any]]) -> dict[str, list[Sequence[Any]]]:
    """Credit rows by their order (each order's rows in the order given)."""
    out: dict[str, list[Sequence[Any]]] = {}
    for row in credits:
        out.setdefault(row[CREDIT_ORDER], []).append(row)
    return out


def order_revenue(credits: Sequence[Sequence[Any]]) -> float:
    """An order's revenue from its credit rows under one model (the first row's): their
    shares of it add up to it."""
    model = credits[0][0]
    return float(sum(row[CREDIT_REVENUE] for row in credits if row[0] == model))


# a credit row's fields, by what they depend on: the order's (the same in all its rows),
# the touch's (the same under every model) and the model's share
_ORDER = [rows.CREDIT.names.index(name) for name in
          ("order_id", "user_id", "conversion_ts_ms", "currency", "stage")]
_TOUCH = [rows.CREDIT.names.index(name) for name in ("channel", "campaign", "touch_ts_ms")]
_INDEX = rows.CREDIT.names.index("touch_index")

PackedCredits = tuple[tuple[Any, ...], dict[int, tuple[Any, ...]],
                      list[tuple[str, list[tuple[int, float]]]]]


def packed_credits(credits: Sequence[Sequence[Any]]) -> PackedCredits:
    """One order's credit rows in a third of their pickled size, to be kept: the order's
    fields once, each touch's once, and per model only (touch index, share)."""
    touches: dict[int, tuple[Any, ...]] = {}
    models: dict[str, list[tuple[int, float]]] = {}
    for row in credits:
        touches.setdefault(row[_INDEX], tuple(row[at] for at in _TOUCH))
        models.setdefault(row[0], []).append((row[_INDEX], row[CREDIT_SHARE]))
    order = tuple(credits[0][at] for at in _ORDER) if credits else ()
    return order, touches, list(models.items())


def unpacked_credits(packed: PackedCredits, revenue: float) -> list[tuple[Any, ...]]:
    """The rows `packed_credits` packed, each with its share of `revenue`."""
    (order_id, user_id, conversion_ts, currency, stage), touches, models = packed
    return [(model, order_id, user_id, conversion_ts, index, *touches[index], share,
             share * revenue, currency, stage)
            for model, shares in models for index, share in shares]


# What becomes of a change event in a stream (`route`)
AN_ORDER = "order"  # a new order: to its journey, and the duplicate check
A_REVISION = "revision"  # the order's revenue now: to what was reported of it
TOO_OLD = "too_old"  # a change beyond the window: its rows are no longer kept
OLD_ROW = "old_row"  # a row of an order beyond the window (a snapshot): nothing to do


def route(kind: str, placed_ms: int, arrival_ms: int, correction_ms: int,
          window_ms: int) -> str:
    """What a stream does with a change of `kind` (changes.py: not IGNORED) to an order
    placed at `placed_ms` that arrived at `arrival_ms` (0: unknown): an order placed that
    arrived within the correction horizon is an order like one from a span; any other
    change, and an old order's row, revises what was reported of it, unless it comes more
    than the window after the order."""
    late_by = arrival_ms - placed_ms if arrival_ms else 0
    if kind == PLACED and (correction_ms <= 0 or late_by <= correction_ms):
        return AN_ORDER
    if late_by > window_ms:
        return OLD_ROW if kind == PLACED else TOO_OLD
    return A_REVISION
