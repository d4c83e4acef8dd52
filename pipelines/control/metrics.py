"""The control loop's Prometheus metrics, on their own registry, served over HTTP by
prometheus_client (`/metrics` on the configured port), for KEDA's prometheus scaler or the
HPA through prometheus-adapter (docs/control.md):

    seedance_gpu_pool_pressure{pool}              udfs/control/pool_pressure.py's pressure, 0..1
    seedance_gpu_pool_utilization_factor{pool}    its three weighted terms (they add up
    seedance_gpu_pool_memory_factor{pool}         to the pressure)
    seedance_gpu_pool_queue_factor{pool}
    seedance_control_decisions_total{rule,status} decisions recorded, by status
    seedance_control_actions_total{executor,status}
    seedance_control_verifications_total{status}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from pipelines.control.state import PoolReading


class ControlMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.pressure = Gauge("seedance_gpu_pool_pressure", "GPU pool scaling pressure (0..1)",
                              ["pool"], registry=registry)
        self.factors = {
            name: Gauge(f"seedance_gpu_pool_{name}_factor",
                        f"the {name} term of the pool's pressure", ["pool"], registry=registry)
            for name in ("utilization", "memory", "queue")}
        self.decisions = Counter("seedance_control_decisions", "decisions recorded",
                                 ["rule", "status"], registry=registry)
        self.actions = Counter("seedance_control_actions", "actions executed",
                               ["executor", "status"], registry=registry)
        self.verifications = Counter("seedance_control_verifications",
                                     "verifications recorded", ["status"], registry=registry)
        self._pools: set[str] = set()
        self._server: Any = None

    def set_pools(self, pools: Mapping[str, PoolReading]) -> None:
        """The current readings; a pool that stopped reporting is removed (no stale gauge
        for an autoscaler to act on)."""
        for gone in self._pools - set(pools):
            self.pressure.remove(gone)
            for gauge in self.factors.values():
                gauge.remove(gone)
        for pool, reading in pools.items():
            self.pressure.labels(pool).set(reading.pressure)
            self.factors["utilization"].labels(pool).set(reading.utilization)
            self.factors["memory"].labels(pool).set(reading.memory)
            self.factors["queue"].labels(pool).set(reading.queue)
        self._pools = set(pools)

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Serve /metrics; returns the bound port (`port` 0: a free one)."""
        self._server, _ = start_http_server(port, address, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
