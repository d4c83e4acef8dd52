"""The control loop's Prometheus endpoint, scraped over HTTP: the pressure gauge and its
factors per pool, the decision counters, and a pool that stops reporting disappearing."""

from __future__ import annotations

import urllib.request

import pytest

from pipelines.control.metrics import ControlMetrics
from pipelines.control.state import PoolReading
from tests.control_inputs import COOL, HOT, NOW, Loop, roi_history


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.decode().splitlines() if line and not line.startswith("#")}


@pytest.fixture
def metrics():
    served = ControlMetrics()
    yield served
    served.close()


def test_pressure_per_pool_over_http(metrics):
    port = metrics.serve(0, "127.0.0.1")
    metrics.set_pools({"a": PoolReading(0.85, 0.4, 0.3, 0.15, 2),
                       "b": PoolReading(0.2, 0.1, 0.1, 0.0, 1)})
    seen = scrape(port)
    assert seen['seedance_gpu_pool_pressure{pool="a"}'] == pytest.approx(0.85)
    assert seen['seedance_gpu_pool_pressure{pool="b"}'] == pytest.approx(0.2)
    assert seen['seedance_gpu_pool_utilization_factor{pool="a"}'] == pytest.approx(0.4)
    assert seen['seedance_gpu_pool_memory_factor{pool="a"}'] == pytest.approx(0.3)
    assert seen['seedance_gpu_pool_queue_factor{pool="a"}'] == pytest.approx(0.15)
    metrics.set_pools({"a": PoolReading(0.5, 0.2, 0.2, 0.1, 2)})
    seen = scrape(port)
    assert seen['seedance_gpu_pool_pressure{pool="a"}'] == pytest.approx(0.5)
    assert not any('pool="b"' in name for name in seen)


def test_the_service_step_feeds_the_endpoint(metrics, tmp_path):
    from pipelines.store.warehouse import Warehouse

    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        loop = Loop(warehouse, "auto")
        loop.service.metrics = metrics
        port = metrics.serve(0, "127.0.0.1")
        loop.feed(roi_history())
        loop.hot(NOW)
        loop.service.step(NOW)
        expected = loop.state.pools(NOW)
    seen = scrape(port)
    assert seen[f'seedance_gpu_pool_pressure{{pool="{HOT}"}}'] == pytest.approx(
        expected[HOT].pressure) and expected[HOT].pressure > 0.8
    assert seen[f'seedance_gpu_pool_pressure{{pool="{COOL}"}}'] < 0.3
    assert seen['seedance_control_decisions_total{rule="scale_out_hot_pool",'
                'status="executed"}'] == 1
    assert seen['seedance_control_actions_total{executor="webhook",status="succeeded"}'] == 2
