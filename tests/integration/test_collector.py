"""A stock OpenTelemetry Collector in front of the job, configured as docs/operations.md
says: OTLP/HTTP in, the batch processor, the contrib kafka exporter (otlp_proto, zstd,
trace-id keys hashed with murmur2, all replicas acknowledging, one sender) onto an
8-partition spans topic. The backlog is sent first, with no job running; then the
attribution job runs unbounded at parallelism 2, as `seedance run` runs it, and is stopped
once its committed offsets reach the end: it credits exactly what the batch reference
credits. The Collector stamps each record with when it sent it (its arrival), so the
telemetry is of the last weeks, within the horizon of now. The Collector is built by the
dev set-up where Go is found."""

from __future__ import annotations

import math
import re
import socket
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipelines.codec.otlp import decode_spans
from pipelines.flink.attribution.job import build_pipeline
from pipelines.kafka.io import ensure_topics, read_all
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import plan_events
from tests.job_io import credit_key, credit_rows, drain, messages, wait_until_consumed
from tests.reference import TEST_HORIZON_MS, reference_credits
from tests.spans import encoded

COLLECTOR = PROJECT_ROOT / ".cache" / "otelcol" / "dist" / "otelcol-seedance"
DOCS = PROJECT_ROOT / "docs" / "operations.md"
REFIT_S = 6 * 3600.0

pytestmark = pytest.mark.skipif(
    not COLLECTOR.exists(), reason="no OpenTelemetry Collector in .cache/otelcol: the dev "
    "set-up builds it where a Go toolchain is found (jobs/setup/bootstrap.sh)")


def documented_config(bootstrap: str, topic: str, http_port: int) -> str:
    """The Collector configuration of docs/operations.md, pointed at this test's broker."""
    text = DOCS.read_text()
    section = text[text.index("## The OpenTelemetry Collector in front"):]
    config = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    config = config.replace('["broker-1:9093"]', f'["{bootstrap}"]')
    config = config.replace("topic: otlp_spans", f"topic: {topic}")
    config = config.replace("grpc: {endpoint: 127.0.0.1:4317}\n", "")
    return config.replace("127.0.0.1:4318", f"127.0.0.1:{http_port}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_http(port: int, collector: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if collector.poll() is not None:
            raise AssertionError(f"the Collector exited:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the Collector's OTLP/HTTP receiver did not open")


def post_otlp(port: int, body: bytes) -> None:
    """What an OTLP/HTTP exporter sends: one ExportTraceServiceRequest, binary protobuf."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def test_the_documented_collector_feeds_a_catch_up(kafka, flink, job_config, topic, tmp_path):
    # the last three weeks: what arrives now is within the tests' 60-day horizon
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) \
        - timedelta(days=21)
    plan = plan_events(300, seed=17, start=start, days=14)
    requests = [v for v in encoded(plan) if v not in plan.malformed]  # HTTP refuses those

    spans = topic("spans", 8)
    port = free_port()
    config = tmp_path / "collector.yaml"
    config.write_text(documented_config(kafka, spans, port))
    log = tmp_path / "collector.log"
    with log.open("w") as out:
        collector = subprocess.Popen([str(COLLECTOR), "--config", str(config)], stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_http(port, collector, log)
        for body in requests:
            post_otlp(port, body)
        sent = sum(decode_spans(body).spans for body in requests)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(decode_spans(v).spans for _, v in read_all(kafka, spans)) >= sent:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"the Collector did not deliver every span:\n"
                                 f"{log.read_text()[-3000:]}")
    finally:
        collector.terminate()
        collector.wait(30)
    keys = {key for key, _ in read_all(kafka, spans)}
    assert all(key and len(key) == 32 for key in keys)  # partition_traces_by_id

    job = job_config.replace("topics", spans=spans).replace("flink", parallelism=2)
    job = job.replace("attribution", refit_every_s=REFIT_S)
    job = job.replace("input", bounded=False).replace("event_time", idleness_s=0.5)
    ensure_topics(kafka, [job.topics.credits, job.topics.late, job.topics.conversions,
                          job.topics.dead_letter, job.topics.accounting])
    env = flink.environment(job)
    build_pipeline(env, job, kafka)
    running = env.execute_async("collector-catch-up")
    wait_until_consumed(kafka, job, timeout_s=400)
    drain(running, tmp_path / "final")
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                for c in reference_credits(plan, job.attribution.models, REFIT_S)}
    rows = credit_rows(kafka, job.topics.credits)
    got = {credit_key(r): r["revenue"] for r in rows}
    assert len(rows) == len(got) and got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
    assert len(messages(kafka, job.topics.late)) == late_beyond(plan, TEST_HORIZON_MS)
    report = messages(kafka, job.topics.accounting)[-1]
    assert report["expired"] == 0
    assert report["records_in"] == report["processed"] + report["dead_lettered"] \
        + report["late"] + report["other"]
