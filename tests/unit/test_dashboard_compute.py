"""The dashboard's Compute page (pipelines/dashboard/compute_views.py): GPU cost per
workload and day with the idle share by the ROI job's rule, the cost per useful
GPU-second, compute per conversion by channel, GPUs that served nothing; and its CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.dashboard.app import DashboardApp
from pipelines.dashboard.filters import Filters
from pipelines.dashboard.queries import build_view
from pipelines.store.warehouse import Warehouse
from schemas.rows import GPU_CALL_COST, GPU_IDLE_COST, ROI_DAILY
from tests.dashboard_warehouse import D1, H, call, call_row, idle_row, roi_row


@pytest.fixture
def url(tmp_path: Path) -> str:
    """GPU-1 on 2026-10-02: ranker 3.0 over 30 s, batch 1.0 over 10 s, 8.0 idle; GPU-2 idle
    (2.0) without calls; two channels' compute in roi_daily."""
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    with Warehouse(url) as wh:
        wh.store(GPU_CALL_COST, [call_row("GPU-1", D1 + H, "t1", "ranker", 20.0, 2.0),
                                 call_row("GPU-1", D1 + 2 * H, "t2", "ranker", 10.0, 1.0),
                                 call_row("GPU-1", D1 + 3 * H, "t3", "batch", 10.0, 1.0)])
        wh.store(GPU_IDLE_COST, [idle_row("GPU-1", D1 + H, 5.0), idle_row("GPU-1", D1 + 4 * H, 3.0),
                                 idle_row("GPU-2", D1 + H, 2.0)])
        wh.store(ROI_DAILY, [
            roi_row("last_click", "2026-10-02", "channel", "search", 4, 400, 100, 6.0),
            roi_row("last_click", "2026-10-02", "channel", "email", 2, 90, 0, 3.0)])
    return url


def test_idle_cost_follows_the_calls_and_the_unit_cost_is_fully_loaded(url: str) -> None:
    with Warehouse(url) as wh:
        view = build_view(wh, "compute", Filters())
    workloads = {r[1]: r for r in view.table("compute_by_workload").rows}
    # 8.0 idle over 4.0 of calls: ranker (3.0) takes 6.0, batch (1.0) 2.0
    assert workloads["ranker"][2:] == pytest.approx((30.0, 3.0, 6.0, 9.0, 6.0 / 9.0))
    assert workloads["batch"][2:] == pytest.approx((10.0, 1.0, 2.0, 3.0, 2.0 / 3.0))
    units = {r[2]: r[5] for r in view.table("compute_unit_cost").rows}
    assert units == pytest.approx({"ranker": 9.0 / 30.0, "batch": 3.0 / 10.0})
    assert view.table("compute_unshared").rows == [("2026-10-02", "GPU-2", 2.0)]
    # the A100 pool: 40 busy GPU-seconds, 30 idle (GPU-1's 20 and GPU-2's 10)
    (pool,) = view.table("compute_pool_busy").rows
    assert pool[:2] == ("2026-10-02", "NVIDIA A100")
    assert pool[2:] == pytest.approx((70.0 / 3600, 40.0 / 70.0))
    channels = {r[0]: r for r in view.table("compute_per_conversion").rows}
    assert channels["search"][3] == pytest.approx(1.5) and channels["email"][3] == 1.5
    kpis = {k.name: k.value for k in view.kpis}
    assert kpis["kpi_gpu_bill"] == pytest.approx(14.0)  # calls 4 + idle 10
    assert kpis["kpi_idle_share"] == pytest.approx(10.0 / 14.0)
    assert kpis["kpi_unit_cost"] == pytest.approx(12.0 / 40.0)  # GPU-2's idle is not useful
    # the selected days only
    with Warehouse(url) as wh:
        other = build_view(wh, "compute", Filters(date_from="2026-10-03"))
    assert other.table("compute_by_workload").rows == []


def test_the_page_and_its_csv_are_served(url: str) -> None:
    status, _, body = call(DashboardApp(url), "/compute")
    assert status.startswith("200") and "Cost per useful GPU-second" in body
    status, _, body = call(DashboardApp(url), "/csv/compute_by_workload.csv")
    assert status.startswith("200")
    assert body.splitlines()[0].startswith("day,workload,gpu_seconds,call_cost,idle_share")


def test_an_empty_warehouse_says_what_to_run(tmp_path: Path) -> None:
    with Warehouse(f"sqlite:///{tmp_path / 'empty.db'}") as wh:
        assert "run the GPU cost job" in build_view(wh, "compute", Filters()).notice
