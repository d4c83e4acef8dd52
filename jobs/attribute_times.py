"""The times of `seedance attribute`'s event input: when each event happened (`timestamp`)
and, optionally, when it reached Kafka (`arrival`, or `arrival_ms` as the raw archive
names it). Both are epoch milliseconds or ISO 8601 (naive means UTC).

With an arrival, an event counts only if it arrived no more than the config's
`journey.correction_days` after it happened (udfs/journeys/arrival.py, the rule the stream and the
backfill apply); an empty arrival, or one of 0 or less (Kafka's -1: no timestamp), is
unknown and the event counts. Without the column every event counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from udfs.journeys import NO_ARRIVAL

ARRIVAL_COLUMNS = ("arrival", "arrival_ms")
TIME_FORMATS = "epoch milliseconds or ISO 8601"


def parse_timestamps(raw: pd.Series) -> pd.Series:
    """Epoch milliseconds, or ISO 8601 (naive means UTC) -> int ms; NaN where unparseable."""
    numeric = pd.to_numeric(raw, errors="coerce")
    parsed = pd.to_datetime(raw.where(numeric.isna()), errors="coerce", utc=True,
                            format="ISO8601")
    iso_ms = (parsed - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return numeric.where(numeric.notna(), iso_ms)


def arrival_column(path: Path, columns: Iterable[object]) -> str | None:
    """The file's arrival column; None if it has none (then every event counts)."""
    found = [name for name in ARRIVAL_COLUMNS if name in set(columns)]
    if len(found) > 1:
        raise ValueError(f"{path}: columns {' and '.join(found)} both give the arrival; "
                         "keep one")
    return found[0] if found else None


def parse_arrivals(text: pd.Series) -> pd.Series:
    """Arrival ms per row (stripped text in): NO_ARRIVAL where empty (unknown: the event
    counts); NaN where the value is no time (an invalid row)."""
    parsed = parse_timestamps(text)
    parsed = parsed.where(np.isfinite(parsed.fillna(0.0).to_numpy(float)))
    return parsed.where(text != "", float(NO_ARRIVAL))
