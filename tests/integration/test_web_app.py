"""A web app that only runs OpenTelemetry's auto-instrumentation (tests/web_app.py: Flask,
the stock OTLP/HTTP exporter) feeds the attribution job: its landing requests become
touches by their UTM parameters, click ids and referrers, clicks inside the site and
direct visits do not, and its checkouts are credited to those channels. A receiver here
stands in for the Collector (OTLP/HTTP in, each request's protobuf onto the spans topic,
as the Collector's Kafka exporter writes it)."""

from __future__ import annotations

import gzip
import math
import os
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import producer
from pipelines.settings.paths import PROJECT_ROOT
from tests.job_io import credit_rows, messages

WEBAPP_PYTHON = PROJECT_ROOT / ".cache" / "webapp-venv" / "bin" / "python"
APP = PROJECT_ROOT / "tests" / "web_app.py"



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def otlp_to_kafka(kafka: str, job_config) -> Iterator[tuple[str, list[int]]]:
    """(the OTLP/HTTP traces URL, the count of requests received): each export request's
    body onto the spans topic, as the Collector's kafka exporter (otlp_proto) sends it."""
    out = producer(kafka)
    topic = job_config.topics.spans
    received: list[int] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            out.send(topic, body).get(30)
            received.append(len(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces", received
    finally:
        server.shutdown()
        out.close()


@pytest.fixture
def web_app(otlp_to_kafka: tuple[str, list[int]], tmp_path: Path) -> Iterator[str]:
    assert WEBAPP_PYTHON.exists(), "no .cache/webapp-venv: `make setup-dev` makes it"
    port = free_port()
    log = tmp_path / "web_app.log"
    with log.open("w") as sink:
        app = subprocess.Popen([str(WEBAPP_PYTHON), str(APP), str(port), otlp_to_kafka[0]],
                               stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env={k: v for k, v in os.environ.items()
                                    if not k.startswith(("OTEL_", "PYTHON"))})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert app.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
        yield base
    finally:
        app.terminate()
        app.wait(timeout=30)


def visit(base: str, path: str, user: str, referrer: str = "",
          form: dict[str, str] | None = None) -> None:
    headers = {"Cookie": f"uid={user}"}
    if referrer:
        headers["Referer"] = referrer
    data = urllib.parse.urlencode(form).encode() if form else None
    urllib.request.urlopen(urllib.request.Request(base + path, data=data, headers=headers),
                           timeout=30).close()
    time.sleep(0.01)  # each request in a millisecond of its own


def test_an_auto_instrumented_web_apps_landings_are_credited(kafka, flink, job_config,
                                                             web_app, otlp_to_kafka, capsys):
    site = web_app
    # u1: a paid search click (UTM), then a click inside the site, then the checkout
    visit(site, "/?utm_source=google&utm_medium=cpc&utm_campaign=brand", "u1")
    visit(site, "/p/1", "u1", referrer=f"{site}/")
    visit(site, "/checkout", "u1", form={"order": "o1", "amount": "40"})
    # u2: an organic search visit (reloaded: the browser sends the referrer again; with
    # journey.visit_minutes it is the same visit), then an auto-tagged Facebook ad click
    visit(site, "/", "u2", referrer="https://www.google.com/")
    visit(site, "/", "u2", referrer="https://www.google.com/")
    visit(site, "/p/2?fbclid=IwAR0abc", "u2", referrer="https://l.facebook.com/")
    visit(site, "/checkout", "u2", form={"order": "o2", "amount": "60"})
    # u3: from another site, then a direct visit (no touch), then the checkout
    visit(site, "/", "u3", referrer="https://news.example.org/story")
    visit(site, "/", "u3")
    visit(site, "/checkout", "u3", form={"order": "o3", "amount": "30"})
    visit(site, "/health", "u9")
    deadline = time.monotonic() + 30
    while len(otlp_to_kafka[1]) < 11:  # one export a request (the SDK's simple processor)
        assert time.monotonic() < deadline, otlp_to_kafka[1]
        time.sleep(0.1)

    config = job_config.replace("attribution", models=("last_click", "linear"))
    config = config.replace("journey", visit_minutes=30.0)
    run_job(config, kafka, env=flink.environment(config))

    rows = credit_rows(kafka, config.topics.credits)
    credits = {(row["model"], row["order_id"], row["channel"]): row["credit"] for row in rows}
    expected = {("last_click", "o1", "paid_search"): 1.0, ("linear", "o1", "paid_search"): 1.0,
                ("last_click", "o2", "paid_social"): 1.0,
                ("linear", "o2", "organic_search"): 0.5, ("linear", "o2", "paid_social"): 0.5,
                ("last_click", "o3", "referral"): 1.0, ("linear", "o3", "referral"): 1.0}
    assert credits.keys() == expected.keys(), credits
    for key, value in expected.items():
        assert math.isclose(credits[key], value), key
    amount = {"o1": 40.0, "o2": 60.0, "o3": 30.0}  # each credit's share of its order's
    assert all(math.isclose(row["revenue"], row["credit"] * amount[row["order_id"]])
               for row in rows)
    campaigns = {row["campaign"] for row in rows if row["order_id"] == "o1"}
    assert campaigns == {"brand"}
    assert messages(kafka, config.topics.dead_letter) == []
    (report,) = [r for r in messages(kafka, config.topics.accounting) if r["final"]]
    # 5 landings (the reload folded into its visit by the journeys) and 3 orders used; the
    # click inside the site, the direct visit and the health check are ordinary tracing
    assert (report["used"], report["dead_lettered"]) == (8, 0)

    # and `seedance inspect` reads the same topic as the job, span by span
    from jobs import cli

    capsys.readouterr()
    assert cli.main(["inspect", "--topic", config.topics.spans, "--bootstrap", kafka,
                     "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "touch - user u1, channel paid_search, campaign brand (channel rule " \
        "'paid_search')" in out
    assert "ignored - a click inside the site or a direct visit" in out
    assert "order - order o1, revenue 40 USD, user u1" in out
    # the first: the fixture's health check, before the visits
    assert out.splitlines()[-1].startswith("4 spans in 4 messages: 1 touch, 1 order")
