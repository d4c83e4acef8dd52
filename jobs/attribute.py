"""`seedance attribute`: batch attribution of a file, with every model of `udfs.attribution.models`.

Reads events (one row per touch or conversion) or path summaries (the peers' shape) from
CSV or Parquet, validates every row (an error names the file, line and field), builds the
journeys and writes one row per model and channel (and campaign); with an interval level
(`--ci`) each row also gets its bootstrap intervals (udfs/attribution/intervals.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.attribute_times import TIME_FORMATS, arrival_column, parse_arrivals, parse_timestamps
from pipelines.backfill.credits import concat_credits
from pipelines.backfill.frames import (
    EVENT_COLUMNS as EVENTS,
)
from pipelines.backfill.frames import (
    SORT_KEY,
    BackfillWindow,
    counted_by_arrival,
    typed,
)
from pipelines.backfill.local import credits_of_events
from pipelines.sources.text_files import BadRow, TextFileError, read_csv
from udfs.attribution import (
    DEFAULT_RESAMPLES,
    attribute,
    credit_intervals,
    credit_intervals_of_rows,
)
from udfs.journeys import NO_ARRIVAL, PATH_SEPARATOR, JourneyTable, apply_transform, from_flat_paths
from udfs.periods import day_of
from udfs.settings import ComputeSettings

EVENT_COLUMNS = ("user_id", "timestamp", "channel", "event_type", "revenue", "order_id")
PATH_COLUMNS = ("path", "conversions", "non_conversions")
# what `--ci` adds after the point columns, the same for both inputs
INTERVAL_COLUMNS = (*(f"{m}{s}" for m in ("conversions", "revenue", "share", "revenue_share")
                      for s in ("", "_low", "_high", "_se")), "resamples", "level")
_KEY_JOIN = "\x1f"  # channel and campaign as one key for the per-row bootstrap


class InputError(ValueError):
    """Invalid input, located: file, line and field."""


@dataclass(frozen=True)
class AttributeRequest:
    input: Path
    out: Path
    # what to compute: the job config's (`--config`, else the shipped defaults), so a
    # file gets the stream's journeys, models, refit periods and lookback
    settings: ComputeSettings
    format: str = "events"
    by_campaign: bool = False
    transform: str = "none"
    skip_invalid: bool = False
    rejects: Path | None = None
    credits_out: Path | None = None  # events input: every credit row, as the stream's
    ci: float | None = None  # interval level, e.g. 0.95: bootstrap intervals per row
    resamples: int | None = None  # of the bootstrap (default DEFAULT_RESAMPLES)
    seed: int = 0  # of the bootstrap


def read_table(path: Path, numeric: tuple[str, ...] = (), columns: tuple[str, ...] = (),
               keep_bad_rows: bool = False) -> tuple[pd.DataFrame, np.ndarray, list[BadRow]]:
    """The file (text columns as strings), the line of each row, and the CSV records with
    a wrong field count (set aside with `keep_bad_rows`, an InputError otherwise).

    `numeric` columns are parsed as numbers where every value is one (fast); a column with
    a bad or empty value stays text and is checked row by row. `columns` (those expected)
    only word the error for an empty file.
    """
    if not path.exists():
        raise InputError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except (pa.ArrowException, OSError, ValueError) as error:
            # pyarrow's message names a '<Buffer>', not the file
            raise InputError(f"{path}: not a Parquet file that can be read "
                             f"({' '.join(str(error).split())})") from None
        frame = frame.astype(object).where(lambda f: f.notna(), None)
        return frame, np.arange(1, len(frame) + 1), []
    if suffix in (".csv", ".txt"):
        try:
            read = read_csv(path, columns, keep_bad_rows=keep_bad_rows)
        except TextFileError as error:
            raise InputError(str(error)) from None
        data = {}
        for name, column in zip(read.header, read.table.columns, strict=True):
            if name in numeric:
                column = _as_number(column)
            data[name] = column.to_pandas()  # a repeated name: the last one, as pandas'
        frame = pd.DataFrame(data, columns=list(data)) if data else pd.DataFrame()
        return frame, read.lines, read.bad_rows
    raise InputError(f"{path}: unsupported file type {suffix!r} (use .csv or .parquet)")


def _as_number(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Whole numbers, else floats, else the text (an empty or bad value: checked later)."""
    for kind in (pa.int64(), pa.float64()):
        try:
            return pc.cast(column, kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return column


Reason = str | Callable[[np.ndarray], pd.Series]
"""A fixed reason, or one built only for the flagged rows (cheap on large valid files)."""


class _Checker:
    """Collects invalid rows (line, field, reason) while columns are parsed whole."""

    def __init__(self, path: Path, frame: pd.DataFrame, lines: np.ndarray,
                 bad_rows: Sequence[BadRow] = ()) -> None:
        self.path, self.frame, self.lines, self.bad_rows = path, frame, lines, list(bad_rows)
        self.invalid = np.zeros(len(frame), bool)
        self.reasons: dict[int, tuple[str, str]] = {}  # row -> (field, reason)
        self._text: dict[str, pd.Series] = {}

    def require_columns(self, columns: tuple[str, ...]) -> None:
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise InputError(f"{self.path}: missing column(s) {', '.join(missing)}; "
                             f"found: {', '.join(map(str, self.frame.columns))}")

    def flag(self, mask: pd.Series | np.ndarray, field: str, reason: Reason) -> None:
        new = np.flatnonzero(np.asarray(mask, bool) & ~self.invalid)
        if not len(new):
            return
        texts = [reason] * len(new) if isinstance(reason, str) else list(reason(new))
        self.invalid[new] = True
        for row, text in zip(new.tolist(), texts, strict=True):
            self.reasons[row] = (field, text)

    def text(self, column: str) -> pd.Series:
        if column not in self._text:
            self._text[column] = self.frame[column].fillna("").astype(str).str.strip()
        return self._text[column]

    def raw(self, column: str, prefix: str,
            quote: bool = True) -> Callable[[np.ndarray], pd.Series]:
        return lambda rows: prefix + self.text(column).iloc[rows].map(repr if quote else str)

    def number(self, column: str, required: pd.Series) -> pd.Series:
        values = pd.to_numeric(self.frame[column], errors="coerce")
        if values.isna().any():  # only then look at the text: empty, or not a number
            raw = self.text(column)
            missing = required & (raw == "")
            self.flag(missing, column, "is missing")
            self.flag(required & ~missing & values.isna(), column,
                      self.raw(column, "is not a number: "))
        finite = np.isfinite(values.fillna(0.0).to_numpy(float))
        self.flag(required & ~finite, column, "is not finite")
        self.flag(required & (values < 0), column, self.raw(column, "is negative: ", quote=False))
        return values.fillna(0.0)

    def finish(self, skip_invalid: bool, rejects: Path | None) -> pd.Series:
        rows = sorted(self.reasons)
        if rows and not skip_invalid:
            field, reason = self.reasons[rows[0]]
            more = len(rows) - 1
            raise InputError(
                f"{self.path}:{self.lines[rows[0]]}: field '{field}' {reason}"
                + (f" (and {more} more invalid rows; --skip-invalid sets them aside)"
                   if more else ""))
        if (rows or self.bad_rows) and rejects is not None:
            rejected = self.frame.iloc[rows].copy()
            rejected.insert(0, "reason", [self.reasons[r][1] for r in rows])
            rejected.insert(0, "field", [self.reasons[r][0] for r in rows])
            rejected.insert(0, "line", self.lines[rows])
            if self.bad_rows:  # a wrong field count: no field can be trusted, the text is kept
                bad = pd.DataFrame({"line": [b.line for b in self.bad_rows], "field": "(row)",
                                    "reason": [f"has {b.problem}: {b.text}"
                                               for b in self.bad_rows]})
                rejected = pd.concat([rejected, bad], ignore_index=True) \
                    .sort_values("line", kind="stable")
            rejected.to_csv(rejects, index=False)
        return pd.Series(~self.invalid, index=self.frame.index)


def load_events(request: AttributeRequest) -> tuple[pd.DataFrame, int]:
    """The file's valid events as the backfill's event frame (in its order), and how many
    rows were set aside."""
    frame, lines, bad_rows = read_table(request.input, numeric=("revenue",),
                                        columns=EVENT_COLUMNS,
                                        keep_bad_rows=request.skip_invalid)
    check = _Checker(request.input, frame, lines, bad_rows)
    check.require_columns(EVENT_COLUMNS)
    kind = check.text("event_type").str.lower()
    check.flag(~kind.isin(["touch", "conversion"]), "event_type",
               check.raw("event_type", "must be touch or conversion, got "))
    is_conversion = kind == "conversion"
    user = check.text("user_id")
    check.flag(user == "", "user_id", "is missing")
    ts_raw = check.text("timestamp")
    ts = parse_timestamps(ts_raw)
    check.flag(ts.isna(), "timestamp", check.raw("timestamp", f"is not {TIME_FORMATS}: "))
    column = arrival_column(request.input, frame.columns)  # without one, every event counts
    arrival = parse_arrivals(check.text(column)) if column else pd.Series(NO_ARRIVAL, frame.index)
    if column:
        check.flag(arrival.isna(), column, check.raw(column, f"is not {TIME_FORMATS}: "))
    channel = check.text("channel")
    check.flag(~is_conversion & (channel == ""), "channel", "is missing on a touch")
    revenue = check.number("revenue", is_conversion)
    order_id = check.text("order_id")
    check.flag(is_conversion & (order_id == ""), "order_id", "is missing on a conversion")
    check.flag(is_conversion & (order_id != "") & order_id.where(is_conversion).duplicated(),
               "order_id", check.raw("order_id", "repeats an earlier order: "))
    keep = check.finish(request.skip_invalid, request.rejects)
    campaign = check.text("campaign") if "campaign" in frame.columns else pd.Series("", frame.index)
    touch = ~is_conversion
    events = pd.DataFrame({
        "user_id": user, "ts_ms": ts.fillna(0).astype(np.int64), "is_conversion": is_conversion,
        "channel": channel.where(touch, ""), "campaign": campaign.where(touch, ""),
        "order_id": order_id.where(is_conversion, ""),
        "revenue": revenue.where(is_conversion, 0.0), "currency": "", "trace_id": "",
        "arrival_ms": arrival.fillna(NO_ARRIVAL).astype(np.int64)})[keep]
    events = typed(events, EVENTS).sort_values(SORT_KEY, kind="stable", ignore_index=True)
    return events, int((~keep).sum()) + len(bad_rows)


def attribute_events(events: pd.DataFrame, settings: ComputeSettings, by_campaign: bool
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per model and channel (and campaign): credited conversions and revenue, summed over
    every conversion's credit rows; and those rows. The journeys and credits are the
    stream's: its journey book, its per-conversion models, and the data-driven models
    refitted at the end of each refit period on the journeys closed by then."""
    is_order = events.is_conversion.to_numpy(bool)
    days = tuple(sorted({day_of(int(ms)) for ms in events.ts_ms[is_order].unique()}))
    columns = ["model", "channel", *(["campaign"] if by_campaign else [])]
    if not days:
        return pd.DataFrame(columns=[*columns, "conversions", "revenue"]), concat_credits([])
    credits, _ = credits_of_events(events, BackfillWindow(days, settings), settings,
                                   progress=lambda _: None)
    summed = credits.groupby(columns, as_index=False, sort=True) \
        .agg(conversions=("credit", "sum"), revenue=("revenue", "sum"))
    summed = summed[(summed.conversions != 0) | (summed.revenue != 0)]
    return summed.sort_values(["model", "revenue"], ascending=[True, False],
                              kind="stable", ignore_index=True), credits


def event_intervals(result: pd.DataFrame, credits: pd.DataFrame, by_campaign: bool,
                    level: float, resamples: int, seed: int) -> pd.DataFrame:
    """`result` (attribute_events') with INTERVAL_COLUMNS: a Poisson bootstrap over the
    file's conversions with their credit rows taken as given (one period: the whole file;
    the refit noise of the data-driven models is not in it)."""
    keys = ["model", "channel", *(["campaign"] if by_campaign else [])]
    if not len(result):
        return pd.DataFrame(columns=[*keys, *INTERVAL_COLUMNS])
    channel = credits.channel + _KEY_JOIN + credits.campaign if by_campaign else credits.channel
    rows = pd.DataFrame({"model": credits.model, "order_id": credits.order_id,
                         "channel": channel, "credit": credits.credit,
                         "revenue": credits.revenue, "period": ""})
    intervals = credit_intervals_of_rows(rows, level, resamples, seed, period="period") \
        .drop(columns=["period", "credit", "revenue"])
    intervals = intervals.rename(columns=lambda c: c.replace("credit", "conversions", 1)
                                 if c.startswith("credit") else c)
    if by_campaign:
        intervals[["channel", "campaign"]] = intervals.channel.str.split(
            _KEY_JOIN, n=1, expand=True)
    out = result.merge(intervals, on=keys, how="left", validate="one_to_one")
    return out.assign(level=level)[[*keys, *INTERVAL_COLUMNS]]


def _check_intervals(request: AttributeRequest) -> None:
    if request.ci is None:
        if request.resamples is not None:
            raise InputError("--resamples sets the bootstrap of --ci: give --ci too")
        return
    if not 0.0 < request.ci < 1.0:
        raise InputError(f"--ci is the intervals' level, strictly between 0 and 1 "
                         f"(e.g. 0.95), got {request.ci:g}")
    if request.resamples is not None and request.resamples < 2:
        raise InputError(f"--resamples must be at least 2, got {request.resamples}")


def load_paths(request: AttributeRequest) -> tuple[JourneyTable, int]:
    frame, lines, bad_rows = read_table(request.input,
                                        numeric=("conversions", "non_conversions", "revenue"),
                                        columns=PATH_COLUMNS,
                                        keep_bad_rows=request.skip_invalid)
    check = _Checker(request.input, frame, lines, bad_rows)
    check.require_columns(PATH_COLUMNS)
    required = pd.Series(True, index=frame.index)
    conversions = check.number("conversions", required)
    non_conversions = check.number("non_conversions", required)
    revenue = check.number("revenue", required) if "revenue" in frame.columns \
        else pd.Series(0.0, index=frame.index)
    path = frame["path"].fillna("").astype(str)
    table, broken = _path_table(path, conversions, non_conversions, revenue)
    if broken:
        check.flag(path.isin(broken), "path",
                   f"has an empty step (steps are joined by '{PATH_SEPARATOR}')")
    keep = check.finish(request.skip_invalid, request.rejects)
    if not keep.all():  # sum again without the rows set aside
        table, _ = _path_table(path[keep], conversions[keep], non_conversions[keep],
                               revenue[keep])
    return table, int((~keep).sum()) + len(bad_rows)


def split_paths(paths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """'a > b' strings -> (all steps, steps per path, path has an empty step)."""
    lists = pc.split_pattern(pa.array(paths, type=pa.string()), pattern=">")
    flat = pc.utf8_trim_whitespace(lists.flatten()).to_numpy(zero_copy_only=False)
    lengths = np.diff(lists.offsets.to_numpy())
    journey = np.repeat(np.arange(len(paths)), lengths)
    empty_step = flat == ""
    empty_path = np.bincount(journey, weights=~empty_step, minlength=len(paths)) == 0
    broken = np.bincount(journey, weights=empty_step, minlength=len(paths)) > 0
    broken &= ~empty_path  # "" is a journey without touches, not a broken one
    keep = ~empty_path[journey]
    return flat[keep], np.where(empty_path, 0, lengths), broken


def _path_table(path: pd.Series, conversions: pd.Series, non_conversions: pd.Series,
                revenue: pd.Series) -> tuple[JourneyTable, list[str]]:
    """Rows of the same path add up; each distinct path is split and checked once."""
    summed = pd.DataFrame({"path": path, "conversions": conversions,
                           "non_conversions": non_conversions, "revenue": revenue}) \
        .groupby("path", sort=False, as_index=False).sum()
    steps, lengths, broken = split_paths(summed.path.to_numpy(dtype=object))
    table = from_flat_paths(steps, lengths, summed.conversions, summed.non_conversions,
                            summed.revenue)
    return table, list(summed.path[broken])


def write_result(frame: pd.DataFrame, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".parquet":
        frame.to_parquet(out, index=False)
    elif out.suffix.lower() == ".csv":
        frame.to_csv(out, index=False)
    else:
        raise InputError(f"{out}: unsupported output type (use .csv or .parquet)")


def run(request: AttributeRequest) -> tuple[pd.DataFrame, dict[str, object]]:
    """ingest -> journeys -> models -> write. Returns the result and run statistics."""
    settings = request.settings
    if request.format == "paths" and request.by_campaign:
        raise InputError("--by campaign needs event input: path summaries have no campaigns")
    if request.format == "events" and request.transform != "none":
        raise InputError("--transform rewrites path summaries (--format paths); events are "
                         "attributed as the stream attributes them")
    if request.format == "paths" and request.credits_out is not None:
        raise InputError("--credits needs event input: path summaries have no conversions")
    _check_intervals(request)
    resamples = request.resamples or DEFAULT_RESAMPLES
    for out in (request.out, request.credits_out):
        if out is not None and out.suffix.lower() not in (".csv", ".parquet"):
            raise InputError(f"{out}: unsupported output type (use .csv or .parquet)")
    started = time.perf_counter()
    if request.format == "events":
        events, rejected = load_events(request)
        in_time = counted_by_arrival(events, settings)  # as the stream counts them
        late, events = int((~in_time).sum()), events[in_time]
        loaded = time.perf_counter()
        result, credits = attribute_events(events, settings, request.by_campaign)
        modelled = time.perf_counter()
        if request.ci is not None:
            result = event_intervals(result, credits, request.by_campaign, request.ci,
                                     resamples, request.seed)
        intervals_s = time.perf_counter() - modelled
        if request.credits_out is not None:
            write_result(credits, request.credits_out)
        converted = credits.drop_duplicates(["order_id"])
        orders = int(events.is_conversion.sum())
        stats: dict[str, object] = {"journeys": orders, "touches": len(events) - orders,
                                    "conversions": float(len(converted)), "info": {},
                                    "late_events": late}
    else:
        table, rejected = load_paths(request)
        table = apply_transform(table, request.transform)
        loaded = time.perf_counter()
        result, infos = attribute(table, settings.models, settings.params, request.by_campaign)
        modelled = time.perf_counter()
        if request.ci is not None:  # the same points, refits per resample for shapley/markov
            result = credit_intervals(table, settings.models, settings.params, request.ci,
                                      resamples, request.seed).assign(level=request.ci)
        intervals_s = time.perf_counter() - modelled
        stats = {"journeys": table.size, "touches": len(table.touch_channel),
                 "conversions": float(table.conversions.sum()), "info": infos}
    write_result(result, request.out)
    stats.update(rejected_rows=rejected, load_s=loaded - started, models_s=modelled - loaded,
                 intervals_s=intervals_s)
    return result, stats
