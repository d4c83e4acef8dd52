"""`seedance attribute`: batch attribution of a file, with every model of `udfs.models`.

Reads events (one row per touch or conversion) or path summaries (the peers' shape) from
CSV or Parquet, validates every row (an error names the file, line and field), builds the
journeys and writes one row per model and channel (and campaign).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from udfs.journey_table import (
    PATH_SEPARATOR,
    JourneyTable,
    apply_transform,
    from_events,
    from_paths,
)
from udfs.models import ModelParams, attribute, validate_models

EVENT_COLUMNS = ("user_id", "timestamp", "channel", "event_type", "revenue", "order_id")
PATH_COLUMNS = ("path", "conversions", "non_conversions")


class InputError(ValueError):
    """Invalid input, located: file, line and field."""


@dataclass(frozen=True)
class AttributeRequest:
    input: Path
    out: Path
    format: str = "events"
    models: tuple[str, ...] = ("last_click", "first_click", "linear", "position_based",
                               "time_decay", "shapley", "shapley_simplified", "markov")
    by_campaign: bool = False
    lookback_days: float = 30.0
    max_touches: int | None = None
    transform: str = "none"
    params: ModelParams = ModelParams()
    skip_invalid: bool = False
    rejects: Path | None = None


def read_table(path: Path) -> tuple[pd.DataFrame, int]:
    """The file as strings, and the line number of its first data row."""
    if not path.exists():
        raise InputError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pd.read_parquet(path).astype(object).where(lambda f: f.notna(), None), 1
    if suffix in (".csv", ".txt"):
        try:
            return pd.read_csv(path, dtype=str, keep_default_na=False), 2
        except pd.errors.ParserError as error:
            raise InputError(f"{path}: not valid CSV: {error}") from None
    raise InputError(f"{path}: unsupported file type {suffix!r} (use .csv or .parquet)")


class _Checker:
    """Collects invalid rows (line, field, reason) while columns are parsed whole."""

    def __init__(self, path: Path, frame: pd.DataFrame, first_line: int) -> None:
        self.path, self.frame, self.first_line = path, frame, first_line
        self.bad = pd.Series("", index=frame.index)
        self.field = pd.Series("", index=frame.index)

    def require_columns(self, columns: tuple[str, ...]) -> None:
        missing = [c for c in columns if c not in self.frame.columns]
        if missing:
            raise InputError(f"{self.path}: missing column(s) {', '.join(missing)}; "
                             f"found: {', '.join(map(str, self.frame.columns))}")

    def flag(self, mask: pd.Series, field: str, reason: pd.Series | str) -> None:
        new = mask & (self.bad == "")
        self.bad = self.bad.where(~new, reason if isinstance(reason, str) else reason[new])
        self.field = self.field.where(~new, field)

    def text(self, column: str) -> pd.Series:
        return self.frame[column].fillna("").astype(str).str.strip()

    def number(self, column: str, required: pd.Series) -> pd.Series:
        raw = self.text(column)
        values = pd.to_numeric(raw, errors="coerce")
        missing = required & (raw == "")
        self.flag(missing, column, "is missing")
        self.flag(required & ~missing & values.isna(), column,
                  "is not a number: " + raw.map(repr))
        self.flag(required & values.notna() & ~np.isfinite(values.fillna(0)), column,
                  "is not finite")
        self.flag(required & (values < 0), column, "is negative: " + raw)
        return values.fillna(0.0)

    def finish(self, skip_invalid: bool, rejects: Path | None) -> pd.Series:
        invalid = self.bad != ""
        if invalid.any() and not skip_invalid:
            row = int(np.flatnonzero(invalid.to_numpy())[0])
            more = int(invalid.sum()) - 1
            raise InputError(
                f"{self.path}:{row + self.first_line}: field '{self.field.iloc[row]}' "
                f"{self.bad.iloc[row]}" + (f" (and {more} more invalid rows; "
                                           "--skip-invalid sets them aside)" if more else ""))
        if invalid.any() and rejects is not None:
            rejected = self.frame[invalid].copy()
            rejected.insert(0, "reason", self.bad[invalid])
            rejected.insert(0, "field", self.field[invalid])
            rejected.insert(0, "line", np.flatnonzero(invalid.to_numpy()) + self.first_line)
            rejected.to_csv(rejects, index=False)
        return ~invalid


def parse_timestamps(raw: pd.Series) -> pd.Series:
    """Epoch milliseconds, or ISO 8601 (naive means UTC) -> int ms; NaN where unparseable."""
    numeric = pd.to_numeric(raw, errors="coerce")
    parsed = pd.to_datetime(raw.where(numeric.isna()), errors="coerce", utc=True,
                            format="ISO8601")
    iso_ms = (parsed - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return numeric.where(numeric.notna(), iso_ms)


def load_events(request: AttributeRequest) -> tuple[JourneyTable, int]:
    frame, first_line = read_table(request.input)
    check = _Checker(request.input, frame, first_line)
    check.require_columns(EVENT_COLUMNS)
    kind = check.text("event_type").str.lower()
    check.flag(~kind.isin(["touch", "conversion"]), "event_type",
               "must be touch or conversion, got " + kind.map(repr))
    is_conversion = kind == "conversion"
    user = check.text("user_id")
    check.flag(user == "", "user_id", "is missing")
    ts_raw = check.text("timestamp")
    ts = parse_timestamps(ts_raw)
    check.flag(ts.isna(), "timestamp", "is not epoch milliseconds or ISO 8601: "
               + ts_raw.map(repr))
    channel = check.text("channel")
    check.flag(~is_conversion & (channel == ""), "channel", "is missing on a touch")
    revenue = check.number("revenue", is_conversion)
    order_id = check.text("order_id")
    check.flag(is_conversion & (order_id == ""), "order_id", "is missing on a conversion")
    check.flag(is_conversion & (order_id != "") & order_id.duplicated() & is_conversion,
               "order_id", "repeats an earlier order: " + order_id)
    keep = check.finish(request.skip_invalid, request.rejects)
    campaign = check.text("campaign") if "campaign" in frame.columns else pd.Series("", frame.index)
    events = pd.DataFrame({"user_id": user, "ts_ms": ts.fillna(0).astype(np.int64),
                           "is_conversion": is_conversion, "channel": channel,
                           "campaign": campaign, "revenue": revenue})[keep]
    table = from_events(events, request.lookback_days, request.max_touches)
    return table, int((~keep).sum())


def load_paths(request: AttributeRequest) -> tuple[JourneyTable, int]:
    frame, first_line = read_table(request.input)
    check = _Checker(request.input, frame, first_line)
    check.require_columns(PATH_COLUMNS)
    required = pd.Series(True, index=frame.index)
    conversions = check.number("conversions", required)
    non_conversions = check.number("non_conversions", required)
    revenue = check.number("revenue", required) if "revenue" in frame.columns \
        else pd.Series(0.0, index=frame.index)
    path = check.text("path")
    check.flag(path.str.contains(r"(?:^|>)\s*(?:>|$)", regex=True) & (path != ""), "path",
               f"has an empty step (steps are joined by '{PATH_SEPARATOR}')")
    keep = check.finish(request.skip_invalid, request.rejects)
    # Rows of the same path add up; splitting then runs once per distinct path.
    summed = pd.DataFrame({"path": path, "conversions": conversions,
                           "non_conversions": non_conversions, "revenue": revenue})[keep] \
        .groupby("path", sort=False, as_index=False).sum()
    steps = [tuple(s.strip() for s in p.split(">")) if p else () for p in summed.path]
    table = from_paths(steps, summed.conversions, summed.non_conversions, summed.revenue)
    return table, int((~keep).sum())


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
    validate_models(request.models)
    if request.format == "paths" and request.by_campaign:
        raise InputError("--by campaign needs event input: path summaries have no campaigns")
    if request.out.suffix.lower() not in (".csv", ".parquet"):
        raise InputError(f"{request.out}: unsupported output type (use .csv or .parquet)")
    started = time.perf_counter()
    loader = load_events if request.format == "events" else load_paths
    table, rejected = loader(request)
    table = apply_transform(table, request.transform)
    loaded = time.perf_counter()
    result, infos = attribute(table, request.models, request.params, request.by_campaign)
    write_result(result, request.out)
    stats: dict[str, object] = {
        "journeys": table.size, "touches": len(table.touch_channel),
        "conversions": float(table.conversions.sum()), "rejected_rows": rejected,
        "load_s": loaded - started, "models_s": time.perf_counter() - loaded, "info": infos}
    return result, stats
