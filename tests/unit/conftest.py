"""Fixtures several unit test modules share: the dashboard's hand-made warehouse (its rows
are built by tests/dashboard_warehouse.py). A module's own fixture of the same name wins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.store.warehouse import Warehouse
from schemas.rows import (
    AD_SPEND,
    ATTRIBUTION_CREDITS,
    CONTROL_ACTION,
    CONTROL_DECISION,
    CONTROL_VERIFICATION,
    CREDIT_INTERVAL,
    EXPERIMENT_RESULT,
    ROI_DAILY,
    ROI_UNALLOCATED,
)
from tests.dashboard_warehouse import decision, declared, interval, result, roi_row


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'warehouse.db'}"


@pytest.fixture
def warehouse(url: str) -> Iterator[Warehouse]:
    """Two days of ROI for last_click and linear: search (campaign gs-1 on google_ads),
    social (meta-1 on meta) and organic (no campaign, no spend)."""
    with Warehouse(url) as wh:
        wh.store(AD_SPEND, [
            ("google_ads", "g-1", "gs-1", "2026-10-01", 100.0, "USD"),
            ("google_ads", "g-1", "gs-1", "2026-10-02", 50.0, "USD"),
            ("meta", "m-1", "meta-1", "2026-10-01", 40.0, "USD"),
            ("meta", "m-1", "meta-1", "2026-10-02", 40.0, "USD")])
        rows = []
        for model, scale in (("last_click", 1.0), ("linear", 0.5)):
            for day, revenue in (("2026-10-01", 400.0), ("2026-10-02", 100.0)):
                search = roi_row(model, day, "channel", "search", 2, revenue,
                                 (100 if day.endswith("1") else 50) * scale, 10)
                rows += [search, roi_row(model, day, "campaign", "gs-1", *search[4:8])]
            rows += [roi_row(model, "2026-10-01", "channel", "social", 1, 80, 40, 0),
                     roi_row(model, "2026-10-01", "campaign", "meta-1", 1, 80, 40, 0),
                     roi_row(model, "2026-10-02", "channel", "organic", 1, 60, 0, 0),
                     roi_row(model, "2026-10-02", "campaign", "", 1, 60, 0, 0),
                     roi_row(model, "2026-10-01", "stage", "new", 3, 480, 100 * scale + 40, 10),
                     roi_row(model, "2026-10-02", "stage", "repeat", 2, 160,
                             50 * scale, 10)]
        wh.store(ROI_DAILY, rows)
        wh.store(ROI_UNALLOCATED, [
            ("linear", "2026-10-01", "ad_spend", "gs-1", 50.0, "USD"),
            ("linear", "2026-10-02", "ad_spend", "gs-1", 25.0, "USD"),
            ("last_click", "2026-10-02", "ad_spend", "meta-1", 40.0, "USD"),
            ("last_click", "2026-10-02", "compute", "", 3.0, "USD")])
        wh.store(ATTRIBUTION_CREDITS, [
            ("last_click", "o1", 1, "u1", 0, "2026-10-01", "search", "gs-1", 0, 1.0, 300.0,
             "USD", "new"),
            ("linear", "o1", 0, "u1", 0, "2026-10-01", "social", "meta-1", 0, 0.5, 150.0,
             "USD", "new"),
            ("linear", "o1", 1, "u1", 0, "2026-10-01", "search", "gs-1", 0, 0.5, 150.0,
             "USD", "new"),
            ("last_click", "o2", 0, "u2", 0, "2026-10-02", "organic", "", 0, 1.0, 60.0,
             "USD", "repeat"),
            ("linear", "o2", 0, "u2", 0, "2026-10-02", "organic", "", 0, 1.0, 60.0,
             "USD", "repeat")])
        yield wh


@pytest.fixture
def loop(warehouse: Warehouse) -> Warehouse:
    """Three experiments (a significant lift, no difference, a sample-ratio mismatch), credit
    intervals of two days, and four control decisions: executed and verified, blocked by a
    limit, awaiting approval, executed and failed."""
    warehouse.store(EXPERIMENT_RESULT, [
        result("bid-strategy", "control", "2026-10-07", (2.5, 2.2, 2.8)),
        result("bid-strategy", "aggressive", "2026-10-07", (2.6, 2.2, 3.0),
               (0.1, -0.4, 0.6), 0.7),
        result("bid-strategy", "control", "2026-10-14", (3.0, 2.8, 3.2)),
        result("bid-strategy", "aggressive", "2026-10-14", (3.82, 3.41, 4.25),
               (0.82, 0.41, 1.25), 0.0004, True),
        result("checkout-copy", "control", "2026-10-14", (2.0, 1.8, 2.2)),
        result("checkout-copy", "b", "2026-10-14", (2.05, 1.8, 2.3), (0.05, -0.25, 0.35), 0.41),
        result("onboarding", "control", "2026-10-14", (1.5, 1.3, 1.7), srm_p=2e-05, users=1200),
        result("onboarding", "new", "2026-10-14", (1.6, 1.4, 1.8), (0.1, -0.2, 0.4), 0.5,
               srm_p=2e-05, users=800)])
    warehouse.store(CREDIT_INTERVAL, [
        interval("last_click", "2026-10-01", "search", (0.7, 0.65, 0.75), 7.0),
        interval("last_click", "2026-10-01", "social", (0.3, 0.25, 0.35), 3.0),
        interval("last_click", "2026-10-02", "search", (0.688, 0.66, 0.71), 11.0),
        interval("last_click", "2026-10-02", "organic", (0.312, 0.298, 0.327), 5.0),
        interval("linear", "2026-10-02", "social", (1.0, 1.0, 1.0), 4.0)])
    warehouse.store(CONTROL_DECISION, [
        decision("d1", "cut-low-roi", "meta-prospecting", "executed", "2026-10-03T06:00:00Z"),
        decision("d2", "cut-low-roi", "gs-generic", "blocked", "2026-10-04T06:00:00Z",
                 blocked_by="max_change_per_week_percent"),
        decision("d3", "scale-gpu", "ranking-pool", "awaiting_approval",
                 "2026-10-05T06:00:00Z", mode="approval", action="scale"),
        decision("d4", "cut-low-roi", "dv360-awareness", "executed", "2026-10-02T06:00:00Z",
                 reason="=HYPERLINK(\"http://x\")")])
    warehouse.store(CONTROL_ACTION, [
        declared(CONTROL_ACTION, action_id="a1", decision_id="d1", executor="webhook",
                 status="succeeded", attempts=2, response="200 OK",
                 executed_at="2026-10-03T06:00:05Z", verify_after="2026-10-05T06:00:05Z"),
        declared(CONTROL_ACTION, action_id="a4", decision_id="d4", executor="webhook",
                 status="failed", attempts=3, response="503 Service Unavailable",
                 executed_at="2026-10-02T06:00:09Z", verify_after="2026-10-04T06:00:09Z")])
    warehouse.store(CONTROL_VERIFICATION, [
        declared(CONTROL_VERIFICATION, action_id="a1", status="success", baseline=1.5,
                 observed=1.68, change_percent=12.0, reason="cut-low-roi: verified",
                 verified_at="2026-10-05T07:00:00Z")])
    return warehouse
