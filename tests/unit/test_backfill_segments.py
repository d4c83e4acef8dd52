"""The backfill's LTV segments (roi.allocation_weights: ltv_segment): the orders of the
recomputed days are segmented from their customers' whole history — the warehouse's
orders of earlier days (and of days finished earlier in the run) with the recomputed ones
— as the stream, which saw every order, segments them; the stream's order_segment rows
reach the warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.backfill import BACKFILL_DDL, window_scores
from pipelines.backfill.frames import ComputedDays
from pipelines.ltv.models_topic import ModelMessage
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.store.backfill import write_day
from pipelines.store.sinks import RoiSink
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.ltv.allocation import tallies_of
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel
from udfs.periods import DAY_MS, day_of

MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4), GammaGamma(p=6.0, q=4.0, v=15.0),
                 period_days=7.0, customers=100.0, fitted_through_day=400.0)
T0 = 20_400 * DAY_MS
MODELS = ("last_click", "linear")


def credit(model: str, order: str, user: str, ts: int, revenue: float) -> dict:
    return {"model": model, "order_id": order, "user_id": user, "conversion_ts_ms": ts,
            "touch_index": 0, "channel": "search", "campaign": "gs", "touch_ts_ms": ts - 1,
            "credit": 1.0, "revenue": revenue, "currency": "USD", "stage": "new",
            "conversion_date": day_of(ts), "day": day_of(ts)}


def test_recomputed_orders_are_segmented_from_the_whole_history(tmp_path: Path):
    orders = [(f"o{u}-{k}", f"u{u}", T0 + (u % 3 + 4 * k) * DAY_MS + 3_600_000,
               10.0 + 40 * ((u + k) % 4)) for u in range(12) for k in range(4)]
    frame = pd.DataFrame(orders, columns=["order_id", "user_id", "ts_ms", "revenue"])
    model_file = tmp_path / "model.json"
    model_file.write_text(ModelMessage(MODEL, 365, 0.0, (60.0, 200.0, 600.0)).to_json())
    config = StreamingJobConfig().replace("attribution", models=MODELS).replace(
        "roi", allocation_weights="ltv_segment", ltv_model=str(model_file))
    settings = config.computation
    assert settings.segmenter is not None
    everything = settings.segmenter.segments(tallies_of(frame))
    assert len(set(everything.values())) >= 3

    days = sorted({day_of(ts) for ts in frame.ts_ms})
    todo = days[5:9] + days[11:]  # days between and after are stored, as earlier ones
    credits = [credit(model, *order) for order in orders for model in MODELS]
    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as wh:
        wh.store(rows.ATTRIBUTION_CREDITS, [
            tuple(c[name] for name in rows.ATTRIBUTION_CREDITS.names)
            for c in credits if c["day"] not in todo])
        computed = ComputedDays(
            credits_of=lambda day: pd.DataFrame([c for c in credits if c["day"] == day]),
            compute=pd.DataFrame(), unlinked=pd.DataFrame())
        found = window_scores(wh, computed, todo, settings)
    assert found is not None
    recomputed = {o for o, _, ts, _ in orders if day_of(ts) in todo}
    assert {order: score.segment for order, score in found.items()} == {
        order: everything[order] for order in recomputed}


def test_no_segments_when_costs_are_shared_by_stage(tmp_path: Path):
    settings = StreamingJobConfig().computation
    computed = ComputedDays(credits_of=lambda day: pytest.fail("nothing to read"),
                            compute=pd.DataFrame(), unlinked=pd.DataFrame())
    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as wh:
        assert window_scores(wh, computed, ["2026-01-01"], settings) is None


def test_the_roi_topics_order_segments_reach_the_warehouse_latest_first(tmp_path: Path):
    """kind=order_segment rows of the roi topic: the latest per (day, order) is kept, as
    for the other rows of the topic (a later order of the customer does not change it; an
    earlier one arriving late does, and the stream sends the row again)."""
    def row(order: str, value: float | None, segment: str) -> bytes:
        return json.dumps({"kind": "order_segment", "day": "2026-10-01", "order_id": order,
                           "user_id": "u1", "predicted_ltv": value,
                           "segment": segment}).encode()

    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as wh:
        RoiSink(wh).write([row("o1", 50.0, "low"), row("o2", None, "unknown")])
        RoiSink(wh).write([row("o1", 90.0, "mid"), row("o1", 700.0, "top")])
        assert wh.query("SELECT order_id, user_id, predicted_ltv, segment FROM "
                        "order_segments ORDER BY order_id") == [
            ("o1", "u1", 700.0, "top"), ("o2", "u1", None, "unknown")]


def test_a_backfilled_day_replaces_its_order_segments(tmp_path: Path):
    day = "2026-10-01"
    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as wh:
        wh.apply_ddl(BACKFILL_DDL)
        for run, segments in (("r1", [(day, "o1", "u1", 5.0, "low"),
                                      (day, "o2", "u2", 900.0, "top")]),
                              ("r2", [(day, "o1", "u1", 95.0, "mid")])):
            write_day(wh, day, [], [], [], (run, day, "archive", "pandas", 0, 0, 0, "now"),
                      orders=[], segments=segments)
        assert wh.query("SELECT order_id, segment FROM order_segments") == [("o1", "mid")]
        write_day(wh, day, [], [], [], ("r3", day, "archive", "pandas", 0, 0, 0, "now"))
        assert wh.query("SELECT order_id FROM order_segments") == [("o1",)]  # None: kept
