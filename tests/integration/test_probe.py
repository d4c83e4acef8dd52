"""`seedance probe` as a user runs it: a dcgm-exporter endpoint or a recording -> Kafka."""

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipelines.codec.metrics import decode_samples
from pipelines.kafka.io import read_all

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def dcgm_exporter():
    """A local HTTP server answering /metrics with real dcgm-exporter output."""
    body = (FIXTURES / "dcgm_metrics.txt").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            status = 200 if self.path == "/metrics" else 404
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            if status == 200:
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


def probe(*args):
    return subprocess.run([sys.executable, "-m", "jobs.cli", "probe", *args],
                          capture_output=True, text=True, timeout=120)


def test_probe_scrapes_dcgm_exporter_and_publishes_otlp_metrics(kafka, topic, dcgm_exporter):
    name = topic("metrics")
    result = probe("--from-prometheus", dcgm_exporter, "--count", "2", "--interval", "0.2",
                   "--topic", name, "--bootstrap", kafka)
    assert result.returncode == 0, result.stderr
    assert "4 samples published" in result.stdout
    assert "memory bandwidth saturated (94 % > 90 %)" in result.stdout
    assert "allocated but idle" in result.stdout  # the L40S holds 35 GiB at 0 %
    messages = list(read_all(kafka, name))
    assert len(messages) == 2
    samples, dead = decode_samples(messages[0][1])
    assert dead == [] and {s.model for s in samples} == {"NVIDIA H100 80GB HBM3",
                                                         "NVIDIA L40S"}


def test_probe_replays_a_recording(kafka, topic):
    name = topic("metrics")
    result = probe("--replay", str(FIXTURES / "gpu_replay.jsonl"), "--topic", name,
                   "--bootstrap", kafka)
    assert result.returncode == 0, result.stderr
    assert len(list(read_all(kafka, name))) == 2


def test_probe_without_any_source_says_what_to_do():
    result = probe("--no-publish", "--count", "1")
    assert result.returncode == 2
    assert "no NVIDIA GPU here" in result.stderr and "--from-prometheus" in result.stderr


def test_probe_with_a_dead_endpoint_fails_clearly():
    result = probe("--no-publish", "--from-prometheus", "http://127.0.0.1:9/metrics",
                   "--count", "1")
    assert result.returncode == 2 and "cannot scrape" in result.stderr
