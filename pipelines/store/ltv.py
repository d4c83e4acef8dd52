"""The warehouse side of lifetime value: the orders, costs and spend the LTV report reads,
and the writers of its tables (ltv_return, ltv_calibration; customer_ltv through its owner,
the loader's CustomerLtvSink), each replaced whole by a refresh, in one transaction.

Frames come back in the column layouts of udfs/ltv/channel_return.py, days as whole UTC day
numbers (days since the epoch).
"""

from __future__ import annotations

import pandas as pd

from pipelines.store.sinks import CustomerLtvSink, TableSink, plain_rows
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.ltv import COST_COLUMNS, CREDIT_COLUMNS, SPEND_COLUMNS
from udfs.periods import DAY_MS, day_start_ms
from udfs.ratios import NO_AD_SPEND, compute_only


def credit_frame(warehouse: Warehouse) -> pd.DataFrame:
    """Every credit row (attribution_credits) in udfs.ltv.channel_return's CREDIT_COLUMNS; `day` is
    the order's UTC day number."""
    found = warehouse.query(
        "SELECT model, order_id, user_id, conversion_ts_ms, stage, channel, campaign, credit, "
        "revenue, currency FROM attribution_credits ORDER BY model, order_id, touch_index")
    frame = pd.DataFrame(found, columns=["model", "order_id", "user_id", "ts", "stage",
                                         "channel", "campaign", "credit", "revenue",
                                         "currency"])
    frame = frame.astype({"ts": "int64", "credit": "float64", "revenue": "float64"})
    frame["day"] = frame.pop("ts") // DAY_MS
    return frame[list(CREDIT_COLUMNS)]


def order_cost_frame(warehouse: Warehouse) -> pd.DataFrame:
    """Each order's allocated ad spend and compute per model (order_costs)."""
    found = warehouse.query("SELECT model, order_id, ad_spend, compute_cost FROM order_costs "
                            "ORDER BY model, order_id")
    return pd.DataFrame(found, columns=list(COST_COLUMNS)).astype(
        {"ad_spend": "float64", "compute_cost": "float64"})


def spend_frame(warehouse: Warehouse) -> pd.DataFrame:
    """Ad spend per campaign and UTC day number, over platforms and accounts (ad_spend)."""
    found = warehouse.query("SELECT day, campaign, SUM(amount) FROM ad_spend "
                            "GROUP BY day, campaign ORDER BY day, campaign")
    return pd.DataFrame([(day_start_ms(str(day)) // DAY_MS, campaign, float(amount))
                         for day, campaign, amount in found], columns=list(SPEND_COLUMNS))


def write_customer_ltv(warehouse: Warehouse, frame: pd.DataFrame) -> int:
    """customer_ltv := the frame (the CUSTOMER_LTV columns), through the table's one writer
    (the loader's CustomerLtvSink, which keeps the rule); the number of rows."""
    return CustomerLtvSink(warehouse).replace_all(plain_rows(rows.CUSTOMER_LTV, frame))


def write_ltv_return(warehouse: Warehouse, frame: pd.DataFrame) -> int:
    """ltv_return := the frame (the LTV_RETURN columns); the number of rows."""
    return TableSink(warehouse, rows.LTV_RETURN).replace_all(
        plain_rows(rows.LTV_RETURN, frame))


def write_ltv_calibration(warehouse: Warehouse, frame: pd.DataFrame) -> int:
    """ltv_calibration := the frame (the LTV_CALIBRATION columns); the number of rows."""
    return TableSink(warehouse, rows.LTV_CALIBRATION).replace_all(
        plain_rows(rows.LTV_CALIBRATION, frame))


def ltv_return_frame(warehouse: Warehouse) -> pd.DataFrame:
    """The ltv_return table (its LTV_RETURN columns), by model, dimension and key, and
    `compute_only`: whether the row's acquisition cost is compute alone (unpaid_keys)."""
    names = list(rows.LTV_RETURN.names)
    found = warehouse.query(f"SELECT {', '.join(names)} FROM ltv_return "
                            "ORDER BY model, dimension, key")
    frame = pd.DataFrame(found, columns=names)
    unpaid = unpaid_keys(warehouse)
    return frame.assign(compute_only=[
        (m, d, k) in unpaid and compute_only(0.0, float(cost)) for m, d, k, cost in zip(
            frame.model, frame.dimension, frame.key, frame.acquisition_cost, strict=True)])


def unpaid_keys(warehouse: Warehouse) -> set[tuple[str, str, str]]:
    """(model, dimension, key) of the channels and campaigns the ROI job allocated no ad
    spend to on any day (roi_daily): the customers they acquired cost compute alone, and
    their first-order and LTV ROI are marked "compute only" as ROI rows are
    (udfs.ratios.compute_only)."""
    return {(str(m), str(d), str(k)) for m, d, k in warehouse.query(
        "SELECT model, dimension, key FROM roi_daily WHERE dimension IN ('channel', "
        "'campaign') GROUP BY model, dimension, key HAVING ABS(SUM(ad_spend)) < ?",
        (NO_AD_SPEND,))}
