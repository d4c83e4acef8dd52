"""The experiment statistics (udfs/experiments/statistics.py STATS_COLUMNS) as a fixed-width table
for a terminal."""

from __future__ import annotations

import pandas as pd


def _number(value: float, spec: str = ".2f") -> str:
    return "-" if pd.isna(value) else format(value, spec)


def _row_cells(row: pd.Series) -> list[str]:
    """The table's cells of one variant."""
    variant = f"{row.variant} (control)" if row.is_control else str(row.variant)
    roi = _number(row.roi)
    if pd.notna(row.roi_low):
        roi += f" [{_number(row.roi_low)}, {_number(row.roi_high)}]"
    roi += " (bootstrap)" if row.roi_method == "bootstrap" else ""
    if row.is_control:
        versus = ""
    elif pd.isna(row.control_variant):
        versus = "no control"
    elif row.diff_method == "too_few_converters":
        versus = "too few converters: no verdict"
    elif pd.isna(row.p_value):
        versus = "not comparable"
    else:
        verdict = "significant" if row.significant else "not significant"
        versus = (f"{row.roi_diff:+.2f} [{row.diff_low:+.2f}, {row.diff_high:+.2f}] "
                  f"{verdict} (p={row.p_value:.3g})")
        versus += " (bootstrap)" if row.diff_method == "bootstrap" else ""
    marginal = "" if pd.isna(row.marginal_cost) else f"{100 * row.marginal_cost:+.1f} %"
    srm = f"MISMATCH (p={row.srm_p_value:.2g})" if row.srm else ""
    return [str(row.flag_key), variant, roi, versus, marginal, f"{row.users:,}", srm,
            str(row.note)]


def strategy_table(stats: pd.DataFrame) -> str:
    """The window statistics as a fixed-width table for a terminal: per experiment and
    variant the ROI with its interval, the difference to control with its significance,
    the marginal cost, the users, and a sample-ratio-mismatch warning."""
    if stats.empty:
        return "no experiments in the window"
    level = f"{100 * float(stats.confidence.iloc[0]):g} %"
    header = ["experiment", "variant", f"ROI [{level} CI]", "vs control", "marginal cost",
              "users", "SRM", "notes"]
    rows = [header] + [_row_cells(row) for _, row in stats.iterrows()]
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
             .rstrip() for cells in rows]
    window = f"window {stats.window_start.iloc[0]} .. {stats.window_end.iloc[0]}"
    return "\n".join([window, *lines])
