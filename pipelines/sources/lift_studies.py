"""Lift studies measured elsewhere -- an ad platform's conversion-lift report, a geo test --
as a CSV file for `seedance incrementality --studies FILE`: one row per study.

    channel,start,end,incremental_conversions,conversions_low,conversions_high,incremental_revenue,revenue_low,revenue_high,source
    paid_social,2026-10-01,2026-10-28,412,298,526,20150,14020,26280,meta conversion lift

`start` and `end` are the study's first and last days (UTC, inclusive); the conversions and
their interval are required, the revenue and its interval optional (empty: the revenue
factor then follows the conversions'); `source` says where it came from. A mistake stops
with the file, the line and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pipelines.sources.text_files import TextFileError, read_csv_rows
from udfs.periods import parse_day

COLUMNS = ("channel", "start", "end", "incremental_conversions", "conversions_low",
           "conversions_high", "incremental_revenue", "revenue_low", "revenue_high", "source")
REQUIRED = COLUMNS[:6]


class LiftStudyError(ValueError):
    """A study file that cannot be used: names the file, line and field."""


@dataclass(frozen=True)
class LiftStudy:
    channel: str
    start: str  # YYYY-MM-DD
    end: str
    conversions: tuple[float, float, float]  # incremental, low, high
    revenue: tuple[float, float, float] | None
    source: str


def read_lift_studies(path: Path) -> list[LiftStudy]:
    try:
        header, rows = read_csv_rows(Path(path), COLUMNS)
    except TextFileError as error:
        raise LiftStudyError(str(error)) from None
    names = [name.strip().lower() for name in header]
    missing = [column for column in REQUIRED if column not in names]
    if missing:
        raise LiftStudyError(f"{path}:1: the header lacks {', '.join(missing)} (columns: "
                             f"{', '.join(COLUMNS)})")
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise LiftStudyError(f"{path}:1: unknown column {unknown[0]!r} (columns: "
                             f"{', '.join(COLUMNS)})")
    studies = []
    for line, fields in rows:
        row = dict(zip(names, (field.strip() for field in fields), strict=True))
        studies.append(_study(row, f"{path}:{line}"))
    if not studies:
        raise LiftStudyError(f"{path}: no studies, only a header")
    return studies


def _study(row: dict[str, str], where: str) -> LiftStudy:
    if not row["channel"]:
        raise LiftStudyError(f"{where}: channel: empty")
    for field in ("start", "end"):
        try:
            parse_day(row[field])
        except ValueError as error:
            raise LiftStudyError(f"{where}: {field}: {error}") from None
    if row["end"] < row["start"]:
        raise LiftStudyError(f"{where}: end: {row['end']} is before start {row['start']}")
    conversions = _triple(row, ("incremental_conversions", "conversions_low",
                                "conversions_high"), where)
    revenue_fields = ("incremental_revenue", "revenue_low", "revenue_high")
    given = [field for field in revenue_fields if row.get(field)]
    if given and len(given) < 3:
        absent = next(field for field in revenue_fields if not row.get(field))
        raise LiftStudyError(f"{where}: {absent}: empty, while {given[0]} is given (all "
                             "three revenue fields, or none)")
    revenue = _triple(row, revenue_fields, where) if given else None
    assert conversions is not None
    return LiftStudy(row["channel"], row["start"], row["end"], conversions, revenue,
                     row.get("source", ""))


def _triple(row: dict[str, str], fields: tuple[str, str, str], where: str
            ) -> tuple[float, float, float]:
    values = []
    for field in fields:
        try:
            value = float(row[field])
        except ValueError:
            raise LiftStudyError(f"{where}: {field}: {row[field]!r} is not a number") from None
        if not math.isfinite(value):
            raise LiftStudyError(f"{where}: {field}: {row[field]!r} is not a finite number")
        values.append(value)
    estimate, low, high = values
    if not low <= estimate <= high:
        raise LiftStudyError(f"{where}: {fields[0]}: {estimate:g} is not within its "
                             f"interval [{low:g}, {high:g}]")
    return estimate, low, high
