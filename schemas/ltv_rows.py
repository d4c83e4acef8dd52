"""The lifetime-value rows (schemas/rows.py lists them in ROWS and re-exports them): each
customer's score, the LTV-based return per channel and campaign, and the calibration of
the purchase model against a holdout. Definitions: docs/ltv-return.md.
"""

from __future__ import annotations

from schemas.row_layout import Column, Row

CUSTOMER_LTV = Row(
    "customer_ltv",
    "One customer's summary and score as of a day under the fitted BG/NBD + Gamma-Gamma "
    "model (udfs/ltv/segments.py): what it is still expected to buy over the horizon and "
    "its LTV segment. The latest refresh replaces the table.",
    (Column("user_id", "string"),
     Column("as_of_day", "date", "the last day of the orders the summary counts (UTC)"),
     Column("frequency", "double", "x: repeat purchase days (purchase days after the first)"),
     Column("recency_days", "double", "t_x: days from the first to the last purchase day"),
     Column("age_days", "double", "T: days from the first purchase day to as_of_day"),
     Column("monetary", "double", "mean value of the repeat purchase days; 0 when x = 0"),
     Column("p_alive", "double", "P(still a customer at as_of_day)"),
     Column("expected_purchases", "double", "E[purchase days in the horizon | x, t_x, T]"),
     Column("expected_order_value", "double", "E[value of a purchase day | x, monetary]"),
     Column("predicted_ltv", "double", "expected purchases x expected order value"),
     Column("segment", "string", "LTV band among the customers: low | mid | high | top"),
     Column("horizon_days", "bigint", "the horizon after as_of_day"),
     Column("fitted_through_day", "date", "the last day of the model's fitting data")),
    key=("user_id",), table="customer_ltv")

LTV_RETURN = Row(
    "ltv_return",
    "The customers a channel or campaign acquired under one attribution model (their first "
    "orders' credit) against the cost allocated to those first orders: CAC, first-order "
    "ROI beside the ROI on their predicted value over the horizon (bootstrap interval), "
    "and the payback period (udfs/ltv/channel_return.py). The latest refresh replaces the table.",
    (Column("model", "string", "attribution model"),
     Column("dimension", "string", "channel | campaign"),
     Column("key", "string", "the channel or campaign"),
     Column("customers", "double", "credited first orders: customers acquired"),
     Column("acquisition_cost", "double", "ad spend + compute allocated to those orders"),
     Column("first_order_revenue", "double"),
     Column("predicted_value", "double", "their value over the horizon from acquisition: "
                                         "realised to as_of_day, expected after it"),
     Column("predicted_value_low", "double", nullable=True),
     Column("predicted_value_high", "double", nullable=True),
     Column("cac", "double", "acquisition_cost / customers", nullable=True),
     Column("ltv_roi", "double", "predicted_value / acquisition_cost (= LTV:CAC)",
            nullable=True),
     Column("ltv_roi_low", "double", nullable=True),
     Column("ltv_roi_high", "double", nullable=True),
     Column("first_order_roi", "double", "first_order_revenue / acquisition_cost",
            nullable=True),
     Column("payback_days", "bigint", "first day (weekly) where value x gross margin "
                                      "reaches the cost; null: not within the horizon",
            nullable=True),
     Column("horizon_days", "bigint"),
     Column("as_of_day", "date"),
     Column("currency", "string"),
     Column("gross_margin", "double", "the margin payback is computed at"),
     Column("level", "double", "the intervals' level"),
     Column("computed_at", "string", "ISO 8601 UTC")),
    key=("model", "dimension", "key"), table="ltv_return")

LTV_CALIBRATION = Row(
    "ltv_calibration",
    "The purchase model against a holdout, by repeat purchases in the calibration period: "
    "customers, predicted and actual mean purchase days in the holdout (the last bucket "
    "holds its frequency and above). The latest calibration replaces the table.",
    (Column("frequency", "bigint", "x in the calibration period (the last: x or more)"),
     Column("customers", "bigint"),
     Column("predicted_purchases", "double", "mean E[purchase days in the holdout]"),
     Column("actual_purchases", "double", "mean purchase days in the holdout"),
     Column("calibration_end", "date", "the calibration's last day (UTC)"),
     Column("holdout_end", "date", "the holdout's last day (UTC)"),
     Column("computed_at", "string", "ISO 8601 UTC")),
    key=("frequency",), table="ltv_calibration")

ORDER_SEGMENT = Row(
    "order_segment",
    "One order's customer value as of the order's day under the allocation model, and its "
    "LTV segment (roi.allocation_weights: ltv_segment; roi topic, kind=order_segment; "
    "udfs/ltv/allocation.py): the weight its credits carried when the day's ad spend was "
    "shared. Only orders of known users.",
    (Column("day", "date", "day of the order (UTC)"),
     Column("order_id", "string"),
     Column("user_id", "string"),
     Column("predicted_ltv", "double", "the customer's value over the model's horizon as of "
                                       "the order's day; null: none finite",
            nullable=True),
     Column("segment", "string", "the allocation model's segment; unknown: no finite value")),
    key=("day", "order_id"), table="order_segments")

LTV_ROWS: tuple[Row, ...] = (CUSTOMER_LTV, LTV_RETURN, LTV_CALIBRATION, ORDER_SEGMENT)
