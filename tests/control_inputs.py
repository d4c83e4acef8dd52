"""What the control loop's tests feed it and what stands in for its outside world: ROI
rows and OTLP GPU metrics as Kafka messages, a recording executor, a step harness (`Loop`)
and a real local webhook endpoint (`Receiver`)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from pipelines.codec.metrics import encode_samples
from pipelines.control.config import ControlConfig, parse_control_config
from pipelines.control.ledger import Ledger, MemoryPublisher
from pipelines.control.service import ControlService
from pipelines.control.state import ControlState
from pipelines.store.warehouse import Warehouse
from schemas.gpu import GpuSample
from schemas.rows import ROI_DAILY

HOT, COOL = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
LAST_DAY = "2024-05-10"


def ms(day: str, hour: int = 6, minute: int = 0) -> int:
    moment = datetime.fromisoformat(day).replace(hour=hour, minute=minute, tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def next_day(day: str, days: int = 1) -> str:
    return (datetime.fromisoformat(day) + timedelta(days=days)).strftime("%Y-%m-%d")


def roi_message(day: str, key: str, roi: float, dimension: str = "campaign") -> bytes:
    values = {"kind": "roi", "model": "last_click", "day": day, "dimension": dimension,
              "key": key, "conversions": 10.0, "revenue": 100.0 * roi, "ad_spend": 90.0,
              "compute_cost": 10.0, "roi": roi, "currency": "USD",
              "roas": 100.0 * roi / 90.0, "margin_roi": roi - 1.0}
    assert set(values) - {"kind"} == set(ROI_DAILY.names)
    return json.dumps(values).encode()


def roi_history(end: str = LAST_DAY, days: int = 33, drop_days: int = 3,
                dropped: str = "spring_sale") -> list[bytes]:
    """30 days ~2.5 for two campaigns, then `drop_days` at 0.6 for `dropped`."""
    messages = []
    for back in range(days - 1, -1, -1):
        day = next_day(end, -back)
        wobble = 0.05 * ((back * 7) % 5 - 2)
        messages.append(roi_message(day, "evergreen", 2.5 + wobble))
        messages.append(roi_message(day, dropped, 0.6 if back < drop_days else 2.5 + wobble))
    return messages


def gpu_payload(ts_ms: int, hot_util: float = 99.0, hot_free_mib: float = 2_000.0) -> bytes:
    """Two H100s (the hot pool, by model name) and one L40S (cool)."""
    def sample(uuid: str, model: str, util: float, used: float, free: float) -> GpuSample:
        return GpuSample(ts_ms, uuid, model, "gpu-node-1", "ranker", "ml", util, 50.0, used,
                         free, 300.0, 1e9)
    return encode_samples([sample("GPU-a", HOT, hot_util, 80_000 - hot_free_mib, hot_free_mib),
                           sample("GPU-b", HOT, hot_util, 80_000 - hot_free_mib, hot_free_mib),
                           sample("GPU-c", COOL, 20.0, 4_000.0, 40_000.0)])


def queue_payload(pool: str, depth: float, ts_ms: int,
                  name: str = "seedance.pool.queue_depth") -> bytes:
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name=name)
    point = metric.gauge.data_points.add(time_unix_nano=ts_ms * 1_000_000, as_double=depth)
    point.attributes.append(KeyValue(key="pool", value=AnyValue(string_value=pool)))
    return request.SerializeToString()


class Recorder:
    """An executor that records what it was asked to do."""

    name = "webhook"

    def __init__(self, ok: bool = True) -> None:
        self.ok, self.requests = ok, []

    def execute(self, request: dict[str, Any]) -> Any:
        from pipelines.control.executors import Outcome

        self.requests.append(request)
        return Outcome(self.ok, 1, "HTTP 200 OK" if self.ok else "HTTP 500")


class Loop:
    def __init__(self, warehouse: Warehouse, mode: str, **changes: Any) -> None:
        self.config: ControlConfig = parse_control_config({"mode": mode, **changes})
        self.state = ControlState(self.config)
        self.publisher = MemoryPublisher()
        self.ledger = Ledger(warehouse, self.publisher)
        self.executor = Recorder()
        self.service = ControlService(self.config, self.state, self.ledger, self.executor)

    def feed(self, roi: list[bytes] = (), metrics: list[bytes] = ()) -> None:  # type: ignore[assignment]
        for message in roi:
            self.state.add_roi(message)
        for payload in metrics:
            self.state.add_metrics(payload)

    def hot(self, now_ms: int, depth: float = 6.0) -> None:
        self.feed(metrics=[gpu_payload(now_ms), queue_payload(HOT, depth, now_ms)])

    def decisions(self) -> dict[str, dict[str, Any]]:
        return {row["rule"] + "/" + row["target"]: row
                for row in self.ledger.recent(100)["decisions"]}


NOW = ms(next_day(LAST_DAY))


class Receiver:
    """A webhook endpoint answering the statuses queued in `answers` (then 200)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.delay_s = 0.0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"path": self.path, "raw": raw,
                                          "headers": dict(self.headers.items())})
                status = receiver.answers.pop(0) if receiver.answers else 200
                time.sleep(receiver.delay_s)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0K3N"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
