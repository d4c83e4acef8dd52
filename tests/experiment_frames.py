"""The experiment tests' window and frames: exposures as the warehouse stores them and
orders with their costs (udfs/experiments/statistics.py's inputs)."""

from __future__ import annotations

import pandas as pd

T0 = 1_756_684_800_000  # 2025-09-01T00:00:00Z
END = "2025-09-07"  # the 7-day window 2025-09-01 .. 2025-09-07
CONVERSION_COLUMNS = ["flag_key", "variant", "user_id", "order_id", "conversion_ts_ms",
                      "revenue", "ad_spend", "compute_cost"]


def stored(rows: list[tuple[str, str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["flag_key", "variant", "user_id", "first_exposure_ms"])


def orders(rows: list[tuple[str, str, str, str, int, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=CONVERSION_COLUMNS)
