"""The ROI job records the days it has closed: `rows` when its watermark passes a day's end
(after the day's report), `compute` once it passes the link window after it too; a drained
stop's final watermark closes nothing, a bounded run's end closes every day; the loader
keeps the markers in roi_days_closed."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.flink.roi.job import RoiPerDay
from pipelines.flink.roi.support import DEAD_LETTERS
from pipelines.store.sinks import RoiSink
from pipelines.store.warehouse import Warehouse
from tests.flink_fakes import Harness, StateStore, Timers
from udfs.lifecycle import StageWeights
from udfs.periods import DAY_MS, day_end_ms, day_start_ms

DAY = "2026-10-03"
WINDOW_MS = 2 * DAY_MS
END_OF_STREAM = 2**63 - 1


def operator(bounded: bool = False, retention_ms: int = 40 * DAY_MS
             ) -> tuple[Harness, Timers]:
    timers = Timers()
    function = RoiPerDay(("last_click",), StageWeights(), None if bounded else retention_ms,
                         "USD", link_window_ms=WINDOW_MS)
    return Harness(function, StateStore(), timers), timers


def advance(harness: Harness, timers: Timers, watermark: int) -> list[dict[str, object]]:
    """Move the watermark and fire what it passed; the rows it yields, decoded."""
    timers.watermark = watermark
    out: list[str] = []
    for timestamp, key in timers.due():
        timers.registered.discard((timestamp, key))
        out += harness.on_timer(timestamp, key)
    return [json.loads(line.split("\n", 1)[1]) for line in out]


def closed(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(r["day"], r["part"], r["watermark_ms"]) for r in rows if r["kind"] == "day_closed"]


def spend(harness: Harness, day: str = DAY) -> None:
    harness.process(("spend", day, day_start_ms(day), ("meta", "1", "retarget", 30.0)), key=day)


def test_a_day_closes_its_rows_at_its_end_and_its_compute_a_link_window_later() -> None:
    harness, timers = operator()
    spend(harness)
    end = day_end_ms(DAY)
    assert advance(harness, timers, end - 1) == []
    rows = advance(harness, timers, end)
    assert closed(rows) == [(DAY, "rows", end)]
    assert rows[-1]["kind"] == "day_closed"  # after the day's report
    assert closed(advance(harness, timers, end + WINDOW_MS - 1)) == []
    assert closed(advance(harness, timers, end + WINDOW_MS)) == [(DAY, "compute",
                                                                 end + WINDOW_MS)]
    # late input restates the closed day without closing it again
    spend(harness)
    assert closed(advance(harness, timers, end + WINDOW_MS + 1)) == []


def test_a_drained_stop_closes_nothing_and_a_bounded_end_closes_every_day() -> None:
    harness, timers = operator()
    spend(harness)
    assert closed(advance(harness, timers, END_OF_STREAM)) == []
    harness, timers = operator(bounded=True)
    spend(harness)
    end = day_end_ms(DAY)
    assert closed(advance(harness, timers, END_OF_STREAM)) == [
        (DAY, "rows", end), (DAY, "compute", end + WINDOW_MS)]


def test_the_loader_keeps_the_closed_days(tmp_path: Path) -> None:
    messages = [json.dumps({"kind": "day_closed", "day": day, "part": part,
                            "watermark_ms": 7}).encode()
                for day, part in ((DAY, "rows"), (DAY, "compute"), ("2026-10-04", "rows"),
                                  ("2026-10-04", "rows"))]
    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as wh:
        RoiSink(wh).write(messages)
        assert wh.query("SELECT day, part FROM roi_days_closed ORDER BY day, part") == [
            (DAY, "compute"), (DAY, "rows"), ("2026-10-04", "rows")]


def test_a_link_window_as_long_as_the_retention_closes_the_compute_as_the_day_retires() -> None:
    harness, timers = operator(retention_ms=WINDOW_MS)
    spend(harness)
    end = day_end_ms(DAY)
    assert closed(advance(harness, timers, end)) == [(DAY, "rows", end)]
    rows = advance(harness, timers, end + WINDOW_MS)
    assert [r["kind"] for r in rows] == ["day_closed"]  # no report: the day retires
    assert closed(rows) == [(DAY, "compute", end + WINDOW_MS)]
    (late,) = harness.process(("spend", DAY, day_start_ms(DAY), ("meta", "1", "r", 1.0)),
                              key=DAY)
    assert late[0] == DEAD_LETTERS  # retired
    letter = json.loads(late[1])
    assert letter["reason"] == "state_retired" and letter["source"] == "roi"
    assert "came after its state was retired" in letter["detail"]
