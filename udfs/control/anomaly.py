"""Robust anomaly detection on daily series, one series per key (ROI of a channel, ...).

Each (key, day) is compared with a trailing baseline of the `window_days` calendar days
before it (the day itself never counts, so a drop cannot hide in its own baseline):

    baseline = median of the window          scale = 1.4826 x MAD of the window
    z        = (value - baseline) / scale    anomalous when z crosses -threshold (drops),
                                             +threshold (rises) or either (both)

Seasonality (optional, `seasonal=True`): the baseline is the median of the same weekday in
the window (4 values with 28 days) once at least `min_seasonal_weeks` of them exist, and the
scale is the MAD of the window's week-over-week differences / sqrt(2) (the weekday pattern
cancels); before that the plain baseline is used (column `seasonal` says which). Fewer
values behind the baseline make a wider threshold: weaker detection than the plain mode.

False alarms. The threshold is not a fixed 3.09: a median and a MAD from 7..28 points are
noisy, and (value - median) / MAD then has far heavier tails than a normal variable (its
0.1 % quantile is about 4.1 with 28 points, 5.7 with 14 and 14 with 7, by simulation). By
default (`k=None`) each row's threshold is therefore calibrated to its own history so that
a stationary Gaussian series alarms on `false_alarm_rate` of its points (default 0.1 %,
split evenly between the two sides when `direction="both"`):

    threshold = sqrt(1 + pi / (2 n_baseline)) x t.ppf(1 - rate, dof = 0.38 x n_scale)

(median's variance, and a Student t whose degrees of freedom were fitted to 10^6 simulated
windows per size, 5..56 points: within ~5 % of the simulated quantiles). A fixed `k` may be
given instead; it is then used as is for every row. Measured (tests/unit/test_anomaly.py):
about 0.1 % per point on Gaussian noise, and several times more on heavy-tailed noise
(Student t, 3 dof: ~1-2 %), for which the Gaussian calibration is optimistic by design.

Degenerate series. A MAD of 0 (more than half of the window equal, e.g. a run of zeros or a
constant ROI) falls back to 1.2533 x the mean absolute deviation; the scale is then floored
at `min_relative_scale` x |baseline| (default 1 %) and `min_scale` (absolute), so a constant
series alarms on a change larger than threshold x 1 % of its level, not on float noise, and
an all-zero series alarms on any value above threshold x `min_scale`. Missing days and NaN
values (a day without cost has ROI NaN) are not history and are never anomalous themselves.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view
from scipy import stats

Direction = Literal["drop", "rise", "both"]
DIRECTIONS = ("drop", "rise", "both")
RESULT_COLUMNS = ["day", "value", "n_history", "baseline", "scale", "z", "threshold",
                  "seasonal", "anomalous"]

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): the MAD of a normal variable is 0.6745 sigma
MEAN_AD_TO_SIGMA = 1.2533  # sqrt(pi / 2): the mean absolute deviation of one is 0.7979 sigma
DOF_PER_POINT = 0.38  # the t that (x - median) / MAD follows, fitted by simulation
SEASONAL_DOF_FACTOR = 1.0  # week-over-week differences overlap: fewer dof per value
_CELLS_PER_CHUNK = 4_000_000  # day x key x window cells held at once (32 MB of float64)


@dataclass(frozen=True)
class AnomalyConfig:
    window_days: int = 28  # trailing baseline, calendar days before the day tested
    min_history: int = 7  # values in the window needed before a day is tested at all
    direction: Direction = "drop"  # drops only (ROI), rises only, or both
    false_alarm_rate: float = 0.001  # per point on Gaussian noise, when k is None
    k: float | None = None  # a fixed threshold on |z| instead of the calibrated one
    seasonal: bool = False  # same-weekday baseline (window_days must be whole weeks)
    min_seasonal_weeks: int = 3  # same-weekday values needed for the seasonal baseline
    min_relative_scale: float = 0.01  # scale floor as a fraction of |baseline|
    min_scale: float = 1e-9  # absolute scale floor (series of zeros)

    def __post_init__(self) -> None:
        if self.window_days < 3:
            raise ValueError(f"window_days must be at least 3, got {self.window_days}")
        if not 3 <= self.min_history <= self.window_days:
            raise ValueError(f"min_history must lie in 3..window_days ({self.window_days}), "
                             f"got {self.min_history}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if not 0 < self.false_alarm_rate < 0.5:
            raise ValueError(f"false_alarm_rate must lie in (0, 0.5), got {self.false_alarm_rate}")
        if self.k is not None and not self.k > 0:
            raise ValueError(f"k must be positive, got {self.k}")
        if self.seasonal and self.window_days % 7:
            raise ValueError(f"a seasonal window must be whole weeks, got {self.window_days} days")
        if self.seasonal and not 2 <= self.min_seasonal_weeks <= self.window_days // 7:
            raise ValueError(f"min_seasonal_weeks must lie in 2..{self.window_days // 7}, "
                             f"got {self.min_seasonal_weeks}")
        if not (self.min_relative_scale >= 0 and self.min_scale > 0):
            raise ValueError("min_relative_scale must be >= 0 and min_scale > 0")


def detect_anomalies(frame: pd.DataFrame, value: str = "roi",
                     keys: Sequence[str] = ("key",), day: str = "day",
                     config: AnomalyConfig = AnomalyConfig()) -> pd.DataFrame:
    """One row per input row: its key columns and RESULT_COLUMNS (`value` renamed "value").

    `frame` holds one row per (keys, day), day as 'YYYY-MM-DD' or datetime; duplicate
    (keys, day) rows are an error (sum them first). Rows too early to test have NaN
    baseline, scale, z and threshold and `anomalous` False."""
    keys = list(keys)
    if frame.duplicated(keys + [day]).any():
        raise ValueError(f"more than one row per ({', '.join(keys)}, {day})")
    days = pd.to_datetime(frame[day]).dt.normalize()
    if frame.empty:
        return pd.DataFrame(columns=keys + RESULT_COLUMNS)
    # one column per key on a gap-free calendar: a missing day is NaN, not a neighbour
    calendar = pd.date_range(days.min(), days.max(), freq="D")
    key_index = pd.MultiIndex.from_frame(frame[keys])
    columns = {"_day": days.to_numpy(), **{k: frame[k].to_numpy() for k in keys},
               "_value": frame[value].to_numpy(dtype=float)}
    grid = pd.DataFrame(columns).pivot(index="_day", columns=keys, values="_value") \
        .reindex(calendar)
    # the windows are (days x keys x window_days) cells: a chunk of keys at a time
    chunk = max(1, _CELLS_PER_CHUNK // (len(calendar) * config.window_days))
    matrix = grid.to_numpy()
    parts = [_window_stats(matrix[:, start:start + chunk], config)
             for start in range(0, matrix.shape[1], chunk)]
    merged = {name: np.concatenate([part[name] for part in parts], axis=1) for name in parts[0]}
    # back from the grid to the input's rows
    row_of_day = calendar.get_indexer(days)
    column_of_key = grid.columns.get_indexer(key_index) if len(keys) > 1 \
        else grid.columns.get_indexer(frame[keys[0]])
    result = frame[keys + [day]].reset_index(drop=True)
    result["value"] = frame[value].to_numpy(dtype=float)
    for name, matrix in merged.items():
        result[name] = matrix[row_of_day, column_of_key]
    result["n_history"] = result.n_history.astype(int)
    result["seasonal"] = result.seasonal.astype(bool)
    result["anomalous"] = _crosses(result.z.to_numpy(), result.threshold.to_numpy(),
                                   config.direction)
    return result[keys + RESULT_COLUMNS]


def calibrated_threshold(n_baseline: np.ndarray | float, n_scale: np.ndarray | float,
                         false_alarm_rate: float = 0.001,
                         direction: Direction = "drop") -> np.ndarray:
    """|z| a Gaussian series crosses with probability `false_alarm_rate` per point, given the
    number of values behind its baseline (median) and behind its scale (MAD)."""
    one_side = false_alarm_rate / 2 if direction == "both" else false_alarm_rate
    n_baseline = np.asarray(n_baseline, dtype=float)
    dof = DOF_PER_POINT * np.asarray(n_scale, dtype=float)
    # the median's own variance (pi / 2n of the variance) adds to the tested value's
    inflation = np.sqrt(1 + math.pi / (2 * n_baseline))
    return np.asarray(inflation * stats.t.ppf(1 - one_side, dof), dtype=float)


def _crosses(z: np.ndarray, threshold: np.ndarray, direction: Direction) -> np.ndarray:
    """Whether z lies beyond the threshold on the watched side(s); NaN never does."""
    with np.errstate(invalid="ignore"):
        if direction == "drop":
            return np.asarray(z < -threshold)
        if direction == "rise":
            return np.asarray(z > threshold)
        return np.asarray(np.abs(z) > threshold)


def _nanmedian(values: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """np.nanmedian without its warning on all-NaN slices (those are days without history)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmedian(values, axis=axis))


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmean(values, axis=axis))


def _trailing_windows(grid: np.ndarray, width: int) -> np.ndarray:
    """(days, keys, width): for each day the `width` days before it (NaN before the start)."""
    padded = np.vstack([np.full((width, grid.shape[1]), np.nan), grid])
    return sliding_window_view(padded, width, axis=0)[:grid.shape[0]]


def _robust_scale(deviations: np.ndarray, baseline: np.ndarray,
                  config: AnomalyConfig) -> np.ndarray:
    """sigma from absolute deviations (last axis): the MAD, the mean absolute deviation where
    the MAD is 0 (more than half the window equal), floored (see the module docstring)."""
    scale = MAD_TO_SIGMA * _nanmedian(deviations, axis=-1)
    fallback = MEAN_AD_TO_SIGMA * _nanmean(deviations, axis=-1)
    scale = np.where(scale > 0, scale, fallback)
    floor = np.maximum(config.min_relative_scale * np.abs(baseline), config.min_scale)
    return np.asarray(np.maximum(scale, floor))


def _window_stats(grid: np.ndarray, config: AnomalyConfig) -> dict[str, np.ndarray]:
    """Baseline, scale, z, threshold, n_history and seasonal for every cell of a
    (days, keys) grid."""
    windows = _trailing_windows(grid, config.window_days)
    n_history = np.sum(~np.isnan(windows), axis=-1)
    baseline = _nanmedian(windows, axis=-1)
    scale = _robust_scale(np.abs(windows - baseline[..., None]), baseline, config)
    n_baseline = n_history.astype(float)
    n_scale = n_history.astype(float)
    seasonal = np.zeros(grid.shape, dtype=bool)
    if config.seasonal:
        season = _seasonal_stats(windows, config)
        seasonal = season["n_same_weekday"] >= config.min_seasonal_weeks
        baseline = np.where(seasonal, season["baseline"], baseline)
        scale = np.where(seasonal, season["scale"], scale)
        n_baseline = np.where(seasonal, season["n_same_weekday"], n_baseline)
        n_scale = np.where(seasonal, season["n_scale"], n_scale)
    tested = (n_history >= config.min_history) & ~np.isnan(grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(tested, (grid - baseline) / scale, np.nan)
        threshold = np.full(grid.shape, float(config.k)) if config.k is not None else \
            calibrated_threshold(np.maximum(n_baseline, 1), np.maximum(n_scale, 1),
                                 config.false_alarm_rate, config.direction)
    nan_where_untested = np.where(tested, 1.0, np.nan)
    return {"n_history": n_history, "baseline": baseline * nan_where_untested,
            "scale": scale * nan_where_untested, "z": z,
            "threshold": threshold * nan_where_untested, "seasonal": seasonal & tested}


def _seasonal_stats(windows: np.ndarray, config: AnomalyConfig) -> dict[str, np.ndarray]:
    """Same-weekday baseline, and the scale from week-over-week differences. With whole
    weeks the window's positions 0, 7, 14, ... fall on the tested day's weekday."""
    same_weekday = windows[..., ::7]
    n_same_weekday = np.sum(~np.isnan(same_weekday), axis=-1).astype(float)
    baseline = _nanmedian(same_weekday, axis=-1)
    # x(d) - x(d - 7) cancels the weekday pattern and has twice the variance of the noise
    # (residuals around the weekday medians would not do: with 3 values per weekday one of
    # them is the median itself, a residual of exactly 0, and the MAD shrinks by a third)
    differences = windows[..., 7:] - windows[..., :-7]
    centre = _nanmedian(differences, axis=-1)
    spread = np.abs(differences - centre[..., None]) / math.sqrt(2)
    scale = _robust_scale(spread, baseline, config)
    n_differences = np.sum(~np.isnan(differences), axis=-1)
    return {"baseline": baseline, "scale": scale, "n_same_weekday": n_same_weekday,
            "n_scale": n_differences * SEASONAL_DOF_FACTOR}
