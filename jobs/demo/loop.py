"""The demo's control loop: the feedback loop closed on the sample's own telemetry.

Two incidents are injected: a runaway bid (one campaign's ad spend restated at several
times its revenue on the sample's last three days, so its ROI falls under 1.0) and a hot
GPU pool (the A100s at 99 % with a full queue, now). The loop, in auto mode, reads the ROI
job's `roi_daily` and the GPU metrics from Kafka, decides (cut the campaign's budget 20 %,
scale the pool out one node), executes through its signed webhook -- here a stand-in for
the ad platform's and the autoscaler's APIs, in this process -- and records every
decision and action in the warehouse and on `control_actions`. The pool then cools, and
after the rule's settle time (5 s in the demo) the loop verifies the scale-out through
the same metrics. The budget cut is verified the same way once days after it have ROI
data; the sample has none, so it stays executed and waiting.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from pipelines.codec.metrics import encode_samples
from pipelines.control.config import DEFAULT_RULES, parse_control_config
from pipelines.control.executors import WebhookExecutor
from pipelines.control.inputs import KafkaInputs
from pipelines.control.ledger import KafkaPublisher, Ledger
from pipelines.control.service import ControlService
from pipelines.control.signing import ReplayGuard, verify_request
from pipelines.control.state import ControlState
from pipelines.kafka.io import producer
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.settings.sections import Secret
from pipelines.sources.ad_spend import SpendRecord
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import GPU_MODELS, Plan
from pipelines.store.control import verification_outcomes
from pipelines.store.warehouse import Warehouse
from schemas.gpu import GpuSample
from schemas.records import Conversion, Touchpoint
from udfs.journeys import ConvertedJourney, JourneyConfig, closed_journeys_of

HOT_GPU = next(uuid for uuid, model in GPU_MODELS.items() if "A100" in model)
SETTLE_S = 5  # the demo's settle time of the scale-out (the shipped rule's: 300 s)


def runaway_bid(plan: Plan, spend: list[SpendRecord]) -> list[SpendRecord]:
    """Restated spend of one campaign on the sample's last three order days, at three
    times what its last clicks earned those days (its last-click ROI falls under 1.0);
    none when no paid campaign won a last click on each of those days."""
    by_user: dict[str, list[Touchpoint | Conversion]] = defaultdict(list)
    for e in valid_events(plan):
        ms = e.ts_ns // 10**6
        by_user[e.user_id].append(
            Touchpoint(e.user_id, ms, e.channel, e.campaign, "", "") if e.kind == "touchpoint"
            else Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency, "", ""))
    earned: dict[tuple[str, str], float] = defaultdict(float)  # (campaign, day) -> revenue
    days = set()
    for events in by_user.values():
        for journey in closed_journeys_of(events, JourneyConfig()):
            if isinstance(journey, ConvertedJourney):
                day = _day(journey.conversion.ts_ms)
                days.add(day)
                if journey.touches:
                    earned[journey.touches[-1].campaign, day] += journey.conversion.revenue
    last = sorted(days)[-3:]
    paid = {(r.campaign, r.day): r for r in spend}
    for campaign in sorted({c for c, _ in paid}):
        if all((campaign, day) in paid and earned.get((campaign, day)) for day in last):
            return [SpendRecord(*paid[campaign, day][:4], round(3 * earned[campaign, day]
                                                                + paid[campaign, day].amount, 2),
                                paid[campaign, day].currency) for day in last]
    return []


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


class StandIn:
    """The ad platform's and the autoscaler's APIs as the loop's webhook reaches them: each
    request checked as docs/control.md tells receivers to (signature over method, path,
    timestamp, key and body; fresh; a key accepted before is acknowledged, not applied
    again), its action applied (recorded), 200 answered."""

    def __init__(self, secret: str) -> None:
        self.secret = Secret(secret)
        self.applied: list[dict[str, Any]] = []
        self.guard = ReplayGuard()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                check = verify_request(stand_in.secret, "POST", self.path,
                                       dict(self.headers.items()), raw, stand_in.guard)
                if check.act:
                    stand_in.applied.append(json.loads(raw))
                self.send_response(200 if check.genuine else 401)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/actions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _pool_metrics(ts_ms: int, util: float, free_mib: float, queue: float) -> list[bytes]:
    """The A100 pool's sample (by model name, the loop's default pools) and its queue."""
    model = GPU_MODELS[HOT_GPU]
    sample = GpuSample(ts_ms, HOT_GPU, model, "gpu-node-1", "ranker", "shop", util, 60.0,
                       80_000.0 - free_mib, free_mib, 350.0, float(ts_ms))
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(
        name="seedance.pool.queue_depth")
    point = metric.gauge.data_points.add(time_unix_nano=ts_ms * 1_000_000, as_double=queue)
    point.attributes.append(KeyValue(key="pool", value=AnyValue(string_value=model)))
    return [encode_samples([sample]), request.SerializeToString()]


def _send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    out = producer(bootstrap)
    try:
        for value in values:
            out.send(topic, value).get(30)
    finally:
        out.close()


def run_control_loop(bootstrap: str, config: StreamingJobConfig, warehouse: Warehouse,
                     actions_topic: str) -> None:
    """The loop in auto mode over the demo's topics: decide and act on the incidents, then
    verify the scale-out once the pool has cooled."""
    key = secrets.token_hex(16)
    stand_in = StandIn(key)
    rules = [dict(rule, settle_s=SETTLE_S) if rule["name"] == "scale_out_hot_pool" else rule
             for rule in DEFAULT_RULES]
    loop = parse_control_config({  # the ROI and metrics topics: the job config's
        "mode": "auto", "metrics_port": 0, "rules": rules, "inputs": {"alerts_topic": ""},
        "outputs": {"actions_topic": actions_topic},
        "executors": {"webhook": {"url": stand_in.url, "secret": key}}}, config)
    state = ControlState(loop)
    inputs = KafkaInputs(bootstrap, loop, state)
    publisher = KafkaPublisher(bootstrap, actions_topic)
    executor = WebhookExecutor(loop.executors.webhook)
    try:
        service = ControlService(loop, state, Ledger(warehouse, publisher), executor)
        now = int(time.time() * 1000)
        _send(bootstrap, config.gpu.metrics_topic, _pool_metrics(now, 99.0, 1_500.0, 7.0))
        inputs.poll()
        print("    step 1: " + service.step(now).line())
        for action in stand_in.applied:
            api = "ad platform" if action["action"] == "budget_change" else "autoscaler"
            print(f"    the {api} applied {action['action']} "
                  f"{json.dumps(action['parameters'])} to {action['target']} (signed request, "
                  f"action {action['action_id']})")
        time.sleep(SETTLE_S + 1)  # the new node takes load: the pool cools
        later = int(time.time() * 1000)
        _send(bootstrap, config.gpu.metrics_topic, _pool_metrics(later, 45.0, 40_000.0, 0.0))
        inputs.poll()
        print(f"    step 2 ({SETTLE_S + 1} s later): " + service.step(later).line())
        for row in verification_outcomes(warehouse):
            rule, target, status, baseline, observed = row
            moved = "" if baseline is None or observed is None \
                else f" ({baseline:.2f} -> {observed:.2f})"
            print(f"    verified {status}: {rule} on {target}{moved}")
    finally:
        inputs.close()
        publisher.close()
        executor.close()
        stand_in.close()
