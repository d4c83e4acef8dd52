"""The Lifetime value page: what the customers each channel and campaign acquired are worth
against what acquiring them cost (ltv_return), the customers per LTV segment
(customer_ltv) and how well the purchase model forecast a holdout (ltv_calibration); the
tables a refresh of the warehouse writes (pipelines/ltv/report.py, docs/ltv-return.md).

The figures are as of the refresh's day, over its horizon: the date filters do not apply;
the model filter chooses the attribution model, the platform and campaign filters the
campaign rows.
"""

from __future__ import annotations

from dataclasses import replace

from pipelines.dashboard.filters import Filters, campaign_filter
from pipelines.dashboard.paging import EVERY_ROW, Page, Paging
from pipelines.dashboard.tables import COMPUTE_ONLY_NOTE, Column, Kpi, Table, View, roi_of
from pipelines.store.ltv import unpaid_keys
from pipelines.store.warehouse import Warehouse
from udfs.ratios import COMPUTE_ONLY, compute_only

LTV_EMPTY = ("No lifetime value yet: load credits and costs (`seedance load`), then refresh "
             "the LTV tables (`seedance ltv return`).")


def _return_columns(dimension: str) -> tuple[Column, ...]:
    return (Column("key", dimension.capitalize()),
            Column("customers", "Customers acquired", "count"),
            Column("acquisition_cost", "Acquisition cost", "money"),
            Column("cac", "CAC", "money"),
            Column("first_order_revenue", "First-order revenue", "money"),
            Column("first_order_roi", "First-order ROI", "ratio"),
            Column("predicted_value", "Predicted value [interval]", "money", interval=True),
            Column("ltv_roi", "LTV ROI [interval]", "ratio", interval=True),
            Column("payback_days", "Payback (days)", "count"))


SEGMENT_COLUMNS = (Column("segment", "Segment"), Column("customers", "Customers", "count"),
                   Column("share", "Share", "share"),
                   Column("mean_ltv", "Mean predicted LTV", "money"),
                   Column("predicted_ltv", "Predicted LTV", "money"),
                   Column("p_alive", "Mean P(alive)", "share"))
CALIBRATION_COLUMNS = (Column("frequency", "Purchases in calibration (x)"),
                       Column("customers", "Customers", "count"),
                       Column("predicted_purchases", "Predicted holdout purchases", "number"),
                       Column("actual_purchases", "Actual holdout purchases", "number"))


def _return_table(warehouse: Warehouse, filters: Filters, paging: Paging,
                  dimension: str) -> Table:
    where, params = campaign_filter("key", filters) if dimension == "campaign" else ("", [])
    page = paging.query(
        warehouse, f"ltv_by_{dimension}",
        "SELECT key, customers, acquisition_cost, cac, first_order_revenue, first_order_roi, "
        "predicted_value, predicted_value_low, predicted_value_high, ltv_roi, ltv_roi_low, "
        "ltv_roi_high, payback_days FROM ltv_return WHERE model = ? AND dimension = ?"
        f"{where}", [filters.model, dimension, *params], "customers DESC, key")
    unpaid = {key for model, dim, key in unpaid_keys(warehouse)
              if model == filters.model and dim == dimension}
    rows = [(key, customers, cost, cac, revenue, first_roi, (value, value_low, value_high),
             (roi, roi_low, roi_high), payback)
            if key not in unpaid or not compute_only(0.0, float(cost)) else
            (key, customers, cost, cac, revenue, COMPUTE_ONLY, (value, value_low, value_high),
             (COMPUTE_ONLY, None, None), payback)
            for (key, customers, cost, cac, revenue, first_roi, value, value_low, value_high,
                 roi, roi_low, roi_high, payback) in page.rows]
    note = ("'—' payback: not paid back within the horizon. "
            if any(r[-1] is None for r in rows) else "")
    if any(r[5] == COMPUTE_ONLY for r in rows):
        note += COMPUTE_ONLY_NOTE + " "
    if dimension == "campaign":
        note += "The platform and campaign filters apply to these rows."
    return Page(rows, page.total, page.offset).table(
        f"ltv_by_{dimension}", f"Customers acquired per {dimension}",
        _return_columns(dimension), note=note.strip(),
        empty=f"No LTV return for {filters.model or 'this model'}: refresh the LTV tables.")


def _segment_table(warehouse: Warehouse) -> Table:
    found = warehouse.query(
        "SELECT segment, COUNT(*), SUM(predicted_ltv), AVG(p_alive), MIN(predicted_ltv) "
        "FROM customer_ltv GROUP BY segment ORDER BY MIN(predicted_ltv), segment")
    everyone = sum(int(r[1]) for r in found)
    rows = [(segment, int(count), int(count) / everyone, float(total) / int(count),
             float(total), float(alive))
            for segment, count, total, alive, _ in found]
    return Table("ltv_segments", "Customers per LTV segment", SEGMENT_COLUMNS, rows,
                 note="Quantile bands of the customers' predicted LTV over the horizon.",
                 empty="No customer has been scored yet.")


def _calibration_table(warehouse: Warehouse) -> Table:
    found = warehouse.query(
        "SELECT frequency, customers, predicted_purchases, actual_purchases, "
        "calibration_end, holdout_end FROM ltv_calibration ORDER BY frequency")
    rows = [(f"{frequency}+" if i == len(found) - 1 else str(frequency), customers,
             predicted, actual)
            for i, (frequency, customers, predicted, actual, _, _) in enumerate(found)]
    note = (f"Fitted on the orders through {found[0][4]}, checked against each customer's "
            f"purchase days up to {found[0][5]}; the last row holds its frequency and above."
            if found else "")
    return Table("ltv_calibration", "Calibration: predicted against actual holdout purchases",
                 CALIBRATION_COLUMNS, rows, note=note,
                 empty="No calibration yet: a holdout check of the warehouse's orders writes "
                       "it (refresh_calibration, pipelines/ltv/report.py).")


def ltv_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("lifetime", "Lifetime value: what the customers each channel acquired are worth")
    if not warehouse.query("SELECT 1 FROM ltv_return LIMIT 1") and not warehouse.query(
            "SELECT 1 FROM customer_ltv LIMIT 1"):
        view.notice = LTV_EMPTY
        return view
    totals = warehouse.query(
        "SELECT SUM(customers), SUM(acquisition_cost), SUM(first_order_revenue), "
        "SUM(predicted_value), MIN(as_of_day), MIN(horizon_days), MIN(gross_margin), "
        "MIN(level), MIN(currency) FROM ltv_return WHERE model = ? AND dimension = 'channel'",
        (filters.model,))[0]
    customers, cost, revenue, value = (float(v or 0.0) for v in totals[:4])
    as_of, horizon, margin, level, currency = totals[4:]
    view.kpis = [
        Kpi("kpi_customers", "Customers acquired", customers, "count"),
        Kpi("kpi_acquisition_cost", "Acquisition cost", cost),
        Kpi("kpi_cac", "CAC", cost / customers if customers > 0 else None),
        Kpi("kpi_first_order_roi", "First-order ROI",
            roi_of(revenue, cost), "ratio"),
        Kpi("kpi_ltv_roi", "LTV ROI", roi_of(value, cost), "ratio"),
        Kpi("kpi_predicted_value", "Predicted value", value)]
    channel = _return_table(warehouse, filters, paging, "channel")
    if as_of is not None:
        channel = replace(channel, note=(
            f"{filters.model}, as of {as_of}, a horizon of {horizon} days, in {currency}: "
            "predicted value = revenue from each customer's first order through the horizon "
            "(realised, then expected); LTV ROI = predicted value / acquisition cost; "
            f"payback at a gross margin of {100 * float(margin):g} %; intervals at "
            f"{100 * float(level):g} % over bootstrap refits. The dates do not apply. "
            + channel.note).strip())
    view.tables = [channel, _return_table(warehouse, filters, paging, "campaign"),
                   _segment_table(warehouse), _calibration_table(warehouse)]
    return view
