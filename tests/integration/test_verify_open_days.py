"""`seedance verify` on SQLite and PostgreSQL while the stream still fills the warehouse:
the ties of a day the ROI job has not closed (roi_days_closed) are open, not broken, and
judged once the day closes."""

from __future__ import annotations

import pytest

from jobs.cli import main
from pipelines.store.verify import closed_days
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.periods import DAY_MS

DAY, DAY2 = "2026-10-03", "2026-10-04"
END_MS = 1_791_072_000_000 - 1  # DAY's last ms (UTC)


def credit(order: str, day: str, ts_ms: int, revenue: float) -> tuple[object, ...]:
    values = {"model": "last_click", "order_id": order, "touch_index": 0, "user_id": "u",
              "conversion_ts_ms": ts_ms, "conversion_date": day, "channel": "display",
              "campaign": "retarget", "touch_ts_ms": ts_ms - 5000, "credit": 1.0,
              "revenue": revenue, "currency": "USD", "stage": "new"}
    return tuple(values[name] for name in rows.ATTRIBUTION_CREDITS.names)


def test_an_open_day_is_no_break_until_it_closes(warehouse_url: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with Warehouse(warehouse_url) as wh:
        wh.store(rows.ATTRIBUTION_CREDITS, [credit("o1", DAY, END_MS - 1000, 100.0),
                                            credit("o2", DAY2, END_MS + DAY_MS - 1000, 50.0)])
        wh.store(rows.ROI_DAILY, [("last_click", DAY, dim, key, 1.0, 100.0, 0.0, 0.0, None,
                                   "USD", None, None)
                                  for dim, key in (("channel", "display"),
                                                   ("campaign", "retarget"), ("stage", "new"))])
        wh.store(rows.ROI_DAY_CLOSED, [(DAY, "rows", END_MS), (DAY, "compute",
                                                               END_MS + 31 * DAY_MS)])
        assert closed_days(wh) == (DAY, DAY)
    assert main(["verify", "--warehouse", warehouse_url]) == 0
    out = capsys.readouterr().out
    # DAY2's revenue and conversions per dimension, and the compute tie over both days
    assert ", 0 broken, 7 open" in out and f"OPEN  {DAY2} not closed" in out
    with Warehouse(warehouse_url) as wh:
        wh.store(rows.ROI_DAY_CLOSED, [(DAY2, "rows", END_MS + DAY_MS)])
    # closed, DAY2 has no report: its revenue and conversions break, per dimension
    assert main(["verify", "--warehouse", warehouse_url]) == 1
    out = capsys.readouterr().out
    assert ", 6 broken, 1 open" in out and f"{DAY2} not closed" not in out
    with Warehouse(warehouse_url) as wh:
        assert wh.query("SELECT COUNT(*) FROM alerts WHERE kind = 'open'") == [(6,)]
