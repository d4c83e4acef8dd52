"""What the LTV models read of the warehouse: each customer's orders, from the credit rows
(attribution_credits) of one attribution model.

A model's credits of an order sum to 1, so the order's revenue is the sum of that model's
credit revenue; the order's time is its conversion time. Orders without a resolvable user
(user_id '') belong to no customer and are left out.
"""

from __future__ import annotations

import numpy as np

from pipelines.store.warehouse import Warehouse

_CUSTOMER = "user_id <> '' AND user_id IS NOT NULL"


def credited_models(warehouse: Warehouse) -> list[str]:
    """The attribution models with credit rows, sorted."""
    return [str(model) for (model,) in warehouse.query(
        "SELECT DISTINCT model FROM attribution_credits ORDER BY model")]


def customer_orders(warehouse: Warehouse, model: str,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(user id, conversion time in ms, revenue) of every order of a known user under
    `model`, ordered by user and time, and the currencies those orders are in (sorted)."""
    found = warehouse.query(
        "SELECT user_id, MIN(conversion_ts_ms), SUM(revenue) FROM attribution_credits "
        f"WHERE model = ? AND {_CUSTOMER} GROUP BY user_id, order_id "
        "ORDER BY user_id, MIN(conversion_ts_ms), order_id", (model,))
    currencies = [str(c) for (c,) in warehouse.query(
        f"SELECT DISTINCT currency FROM attribution_credits WHERE model = ? AND {_CUSTOMER} "
        "ORDER BY currency", (model,))]
    if not found:
        return np.array([], dtype=str), np.zeros(0), np.zeros(0), currencies
    users, times, revenue = zip(*found, strict=True)
    return (np.array(users, dtype=str), np.array(times, dtype=np.float64),
            np.array(revenue, dtype=np.float64), currencies)


def order_at(warehouse: Warehouse, model: str, user: str, ts_ms: int) -> str:
    """The id of `user`'s order at conversion time `ts_ms` under `model` (the first by id;
    '' if none): what names an order customer_orders returned."""
    found = warehouse.query(
        "SELECT MIN(order_id) FROM attribution_credits WHERE model = ? AND user_id = ? "
        "AND conversion_ts_ms = ?", (model, user, ts_ms))
    return str(found[0][0]) if found and found[0][0] is not None else ""
