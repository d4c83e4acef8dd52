"""How sure the figures are: the experiments' strategy table (experiment_results, what
`seedance experiments` stores) and each channel's credit with its bootstrap interval
(credit_intervals, what `seedance intervals` stores).

The strategy table shows what udfs.experiments.statistics.strategy_table prints, cell for cell: per
experiment (its newest window) and variant the ROI with its interval, the difference to
the control with its interval, significance and p-value, the marginal cost and the
sample-ratio check. An interval cell is one (value, low, high) column: the page shows
"3.82 [3.41, 4.25]", the CSV its three numbers.
"""

from __future__ import annotations

from typing import Any

from pipelines.dashboard.filters import Filters, day_range
from pipelines.dashboard.paging import EVERY_ROW, Page, Paging
from pipelines.dashboard.tables import Column, Kpi, Table, View
from pipelines.store.warehouse import Warehouse

EXPERIMENTS_EMPTY = (
    "No experiment results yet: run the experiments job (`seedance run --job experiments`), "
    "load its rows (`seedance load`), then compute the strategy table "
    "(`seedance experiments`).")
NOT_BY_CAMPAIGN = ("The platform, campaign and model filters do not apply here: experiments "
                   "are costed under the experiments' own cost model; the dates choose the "
                   "newest window ending inside them.")

STRATEGY_COLUMNS = (
    Column("experiment", "Experiment"), Column("variant", "Variant"), Column("role", "Role"),
    Column("window", "Window"), Column("users", "Users", "count"),
    Column("conversions", "Conversions", "count"), Column("revenue", "Revenue", "money"),
    Column("cost", "Cost", "money"), Column("roi", "ROI [interval]", "ratio", interval=True),
    Column("roi_diff", "vs control [interval]", "delta", interval=True,
           bounds=("diff_low", "diff_high")),
    Column("verdict", "Significance"), Column("p_value", "p", "p"),
    Column("marginal_cost", "Marginal cost", "percent"), Column("srm", "Sample ratio"),
    Column("srm_p_value", "SRM p", "p"), Column("note", "Notes"))


def _verdict(is_control: bool, control_variant: str, p_value: float | None,
             significant: bool, note: str = "") -> str:
    if is_control:
        return "control"
    if not control_variant:
        return "no control"
    if "too few converters" in note:
        return "too few converters"
    if p_value is None:
        return "not comparable"
    return "significant" if significant else "not significant"


def _strategy_rows(results: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out = []
    for (flag_key, variant, window_end, window_start, is_control, control_variant, users,
         conversions, revenue, ad_spend, compute_cost, roi, roi_low, roi_high, roi_diff,
         diff_low, diff_high, p_value, significant, marginal_cost, srm_p_value, srm,
         _confidence, note) in results:
        is_control, significant, srm = bool(is_control), bool(significant), bool(srm)
        out.append((
            flag_key, variant,
            "control" if is_control else f"vs {control_variant}" if control_variant else None,
            f"{window_start} .. {window_end}", users, conversions, revenue,
            ad_spend + compute_cost, (roi, roi_low, roi_high),
            (None, None, None) if is_control else (roi_diff, diff_low, diff_high),
            _verdict(is_control, control_variant, p_value, significant, note or ""),
            None if is_control else p_value, marginal_cost,
            "MISMATCH" if srm else "ok" if srm_p_value is not None else None, srm_p_value,
            note or ""))
    return out


def experiments_view(warehouse: Warehouse, filters: Filters,
                     paging: Paging = EVERY_ROW) -> View:
    view = View("experiments", "Experiments: ROI per variant against the control")
    if not warehouse.query("SELECT 1 FROM experiment_results LIMIT 1"):
        view.notice = EXPERIMENTS_EMPTY
        return view
    where, params = day_range("l.window_end", filters)
    # each experiment's newest window ending inside the dates (found once per experiment,
    # not once per row: 10,000 variants of one flag made that quadratic)
    newest = ("FROM experiment_results r JOIN (SELECT l.flag_key, MAX(l.window_end) AS "
              f"newest FROM experiment_results l WHERE 1 = 1{where} GROUP BY l.flag_key) n "
              "ON n.flag_key = r.flag_key AND n.newest = r.window_end")
    page = paging.query(
        warehouse, "experiment_strategy",
        "SELECT r.flag_key, r.variant, r.window_end, r.window_start, r.is_control, "
        "r.control_variant, r.users, r.conversions, r.revenue, r.ad_spend, r.compute_cost, "
        "r.roi, r.roi_low, r.roi_high, r.roi_diff, r.diff_low, r.diff_high, r.p_value, "
        "r.significant, r.marginal_cost, r.srm_p_value, r.srm, r.confidence, r.note "
        f"{newest}", params, "r.flag_key, r.is_control DESC, r.variant")
    # the headline figures over every variant, whichever page is shown ('significant' as
    # _verdict says it: a variant against a control, comparable, enough converters)
    (experiments, significant), = warehouse.query(
        "SELECT COUNT(DISTINCT r.flag_key), COUNT(CASE WHEN NOT r.is_control AND "
        "r.control_variant <> '' AND r.note NOT LIKE '%too few converters%' AND r.p_value "
        f"IS NOT NULL AND r.significant THEN 1 END) {newest}", params)
    srm_p = dict(warehouse.query(f"SELECT r.flag_key, MIN(r.srm_p_value) {newest} WHERE r.srm "
                                 "GROUP BY r.flag_key ORDER BY r.flag_key", params))
    levels = sorted({f"{100 * float(c):g} %" for c, in warehouse.query(
        f"SELECT DISTINCT r.confidence {newest}", params)})
    view.warnings = [
        f"Sample ratio mismatch in {flag}{'' if p is None else f' (p = {p:.2g})'}: its users "
        "per variant differ from the planned split, so the assignment is broken and its "
        "comparison cannot be trusted until that is fixed." for flag, p in srm_p.items()]
    view.kpis = [
        Kpi("kpi_experiments", "Experiments", experiments, "count"),
        Kpi("kpi_significant", "Significant differences", significant, "count"),
        Kpi("kpi_srm", "Sample ratio mismatches", len(srm_p), "count")]
    view.tables = [Page(_strategy_rows(page.rows), page.total, page.offset).table(
        "experiment_strategy", "Strategy table (each experiment's newest window)",
        STRATEGY_COLUMNS, warn=("srm", "MISMATCH"),
        note=(f"Intervals at {', '.join(levels) or '—'}; 'significant' when p is below "
              "1 - that level. Cost = allocated ad spend + compute; marginal cost = cost per "
              "user against the control's. " + NOT_BY_CAMPAIGN),
        empty="No experiment window ends inside these dates.")]
    return view


INTERVAL_COLUMNS = (
    Column("channel", "Channel"), Column("period", "Day"),
    Column("share", "Share of credit [interval]", "share", interval=True),
    Column("credit", "Credited conversions [interval]", "number", interval=True),
    Column("revenue", "Revenue [interval]", "money", interval=True),
    Column("level", "Level", "share"), Column("resamples", "Resamples", "count"))


def credit_interval_table(warehouse: Warehouse, filters: Filters,
                          paging: Paging = EVERY_ROW) -> Table:
    """The model's credit per channel with its intervals, of the newest day in the selected
    range that has intervals (they are per day: a range's would need its own bootstrap)."""
    where, params = day_range("period", filters)
    page = paging.query(
        warehouse, "credit_intervals",
        "SELECT channel, period, share, share_low, share_high, credit, credit_low, "
        "credit_high, revenue, revenue_low, revenue_high, level, resamples FROM "
        "credit_intervals WHERE model = ? AND period = (SELECT MAX(period) FROM "
        f"credit_intervals WHERE model = ?{where})", [filters.model, filters.model, *params],
        "share DESC, channel")
    rows = page.rows
    shown = [(channel, period, (share, share_low, share_high),
              (credit, credit_low, credit_high), (revenue, revenue_low, revenue_high),
              level, resamples)
             for (channel, period, share, share_low, share_high, credit, credit_low,
                  credit_high, revenue, revenue_low, revenue_high, level, resamples) in rows]
    day = rows[0][1] if rows else ""
    note = (f"{filters.model}, {day}: intervals are per day, so the newest day of the "
            "selection with intervals is shown; bootstrap over that day's orders."
            if rows else "")
    if rows and filters.by_campaign:
        note += " Per channel, not per campaign: the platform and campaign filters do not apply."
    return Page(shown, page.total, page.offset).table(
        "credit_intervals", "How sure is each channel's credit", INTERVAL_COLUMNS, note=note,
        empty=f"No credit intervals for {filters.model or 'this model'} in these "
              "days: `seedance intervals` computes them from the loaded credits.")


INCREMENTALITY_EMPTY = (
    "No calibrated ROI yet: run a holdout test per channel (a flag holdout.<channel> with "
    "the variants exposed and held_out) or bring a lift study's CSV, then "
    "`seedance incrementality` (docs/incrementality.md).")
CALIBRATED_COLUMNS = (
    Column("channel", "Channel"), Column("revenue", "Revenue", "money"),
    Column("calibrated_revenue", "Calibrated revenue [interval]", "money", interval=True),
    Column("cost", "Cost", "money"), Column("roi", "ROI", "ratio"),
    Column("calibrated_roi", "Calibrated ROI [interval]", "ratio", interval=True),
    Column("roas", "ROAS", "ratio"), Column("calibrated_roas", "Calibrated ROAS", "ratio"),
    Column("factor", "Factor [interval]", "ratio", interval=True),
    Column("test_id", "Test"), Column("age_days", "Age (days)", "count"),
    Column("flip", "Once calibrated"))
LIFT_COLUMNS = (
    Column("test_id", "Test"), Column("channel", "Channel"), Column("metric", "Metric"),
    Column("days", "Days"), Column("exposed_users", "Exposed", "count"),
    Column("held_out_users", "Held out", "count"),
    Column("incremental", "Incremental [interval]", "number", interval=True),
    Column("level", "Level", "share"))


def incrementality_view(warehouse: Warehouse, filters: Filters,
                        paging: Paging = EVERY_ROW) -> View:
    """ROI per channel calibrated by lift tests beside uncalibrated (roi_calibrated, what
    `seedance incrementality` stores) for the selected model, and the tests themselves."""
    view = View("incrementality", "Incrementality: what each channel causes, by lift tests")
    if not warehouse.query("SELECT 1 FROM roi_calibrated LIMIT 1"):
        view.notice = INCREMENTALITY_EMPTY
        return view
    page = paging.query(
        warehouse, "roi_calibrated",
        "SELECT r.channel, r.revenue, r.calibrated_revenue, r.calibrated_revenue_low, "
        "r.calibrated_revenue_high, r.cost, r.roi, r.calibrated_roi, r.calibrated_roi_low, "
        "r.calibrated_roi_high, r.roas, r.calibrated_roas, f.factor, f.low, f.high, r.test_id, "
        "r.age_days, r.first_day, r.last_day FROM roi_calibrated r LEFT JOIN "
        "calibration_factors f ON f.model = r.model AND f.channel = r.channel AND "
        "f.metric = 'revenue' WHERE r.model = ?",
        [filters.model], "r.channel")
    shown = [(channel, revenue, (cal, cal_low, cal_high), cost, roi,
              (cal_roi, roi_low, roi_high), roas, cal_roas, (factor, low, high), test_id or "",
              age,
              "ROI below 1" if roi is not None and cal_roi is not None and roi >= 1 > cal_roi
              else "")
             for (channel, revenue, cal, cal_low, cal_high, cost, roi, cal_roi, roi_low,
                  roi_high, roas, cal_roas, factor, low, high, test_id, age, _, _)
             in page.rows]
    window = f"{page.rows[0][17]} .. {page.rows[0][18]}" if page.rows else ""
    (tested, flips), = warehouse.query(
        "SELECT COUNT(CASE WHEN test_id <> '' THEN 1 END), COUNT(CASE WHEN roi >= 1 AND "
        "calibrated_roi < 1 THEN 1 END) FROM roi_calibrated WHERE model = ?", [filters.model])
    view.kpis = [Kpi("kpi_tested", "Channels tested", tested, "count"),
                 Kpi("kpi_flips", "ROI below 1 once calibrated", flips, "count")]
    tests = paging.query(
        warehouse, "lift_tests",
        "SELECT test_id, channel, metric, start_day, end_day, exposed_users, held_out_users, "
        "incremental, low, high, level FROM lift_tests", [], "channel, test_id, metric")
    view.tables = [
        Page(shown, page.total, page.offset).table(
            "roi_calibrated", f"ROI per channel under {filters.model}, {window}",
            CALIBRATED_COLUMNS, warn=("flip", "ROI below 1"),
            note="Each tested channel's revenue scaled to what its latest lift test says "
                 "it caused; (baseline) holds the rest, so the calibrated revenue adds up "
                 "to the uncalibrated. Untested channels keep their credit. The dates, "
                 "platform and campaign filters do not apply: the window is the one "
                 "`seedance incrementality` ran over.",
            empty=f"No calibrated ROI for {filters.model or 'this model'}."),
        Page([(test_id, channel, metric, f"{start} .. {end}", exposed, held,
               (incremental, low, high), level)
              for test_id, channel, metric, start, end, exposed, held, incremental, low,
              high, level in tests.rows], tests.total, tests.offset).table(
            "lift_tests", "Lift tests", LIFT_COLUMNS,
            note="Incremental conversions and revenue caused in the exposed users: the "
                 "exposed against the held-out users' mean, Welch's interval.",
            empty="No lift tests.")]
    return view
