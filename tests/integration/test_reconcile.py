"""Daily reconciliation end to end: our results in the warehouse (SQLite and PostgreSQL), a
Google Ads report file and a FOCUS bill on a real Kafka topic, the Beam job on the
DirectRunner, alerts to a real Kafka topic and a real local webhook receiver that checks
the HMAC signature. One campaign's conversions under-reported by 7 % raises exactly one
alert; 3 % raises none; reruns add nothing; a restatement resolves; a stale one is ignored.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.cli import main
from jobs.reconcile import ReconcileRequest, run
from pipelines.kafka.io import producer, read_all
from pipelines.reconcile.alerts import ALERT_ID_HEADER, SIGNATURE_HEADER, WebhookSink, verify
from pipelines.reconcile.config import (
    ReconcileConfig,
    Secret,
    WebhookSection,
    load_reconcile_config,
)
from pipelines.reconcile.store import ReconcileStore
from pipelines.store.sinks import CreditsSink, GpuCostsSink
from pipelines.store.warehouse import Warehouse

pytestmark = pytest.mark.integration

DAY = "2025-03-01"
ACCOUNT = "1234567890"
SECRET = Secret("test-webhook-key")
T_1500Z = 1_740_841_200_000  # 2025-03-01T15:00Z = 10:00 in New York
T_0200Z_NEXT = 1_740_880_800_000  # 2025-03-02T02:00Z = 21:00 on the 1st in New York
HOUR = 3_600_000
MIDNIGHT = 1_740_787_200_000  # 2025-03-01T00:00Z


# --- a real webhook receiver ---------------------------------------------------------

class Receiver:
    """HTTP server on a free loopback port that records each POST and checks its
    signature; answers 503 to the first `fail_first` requests, 401 to a bad signature."""

    def __init__(self, secret: Secret, fail_first: int = 0) -> None:
        self.requests: list[dict] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                valid = verify(secret, raw, self.headers.get(SIGNATURE_HEADER, ""))
                receiver.requests.append({"raw": raw, "valid": valid,
                                          "headers": dict(self.headers)})
                if receiver.fail_first > 0:
                    receiver.fail_first -= 1
                    self.send_response(503)
                else:
                    self.send_response(204 if valid else 401)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/seedance-alerts"

    @property
    def delivered(self) -> list[dict]:
        """Bodies of the signed requests, parsed."""
        return [json.loads(r["raw"]) for r in self.requests if r["valid"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(SECRET)
    try:
        yield server
    finally:
        server.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- our side and theirs -------------------------------------------------------------

def credit(model: str, order: str, campaign: str, ts_ms: int, revenue: float, share: float = 1.0,
           index: int = 0, currency: str = "USD") -> bytes:
    return json.dumps({"model": model, "order_id": order, "user_id": f"u-{order}",
                       "conversion_ts_ms": ts_ms, "touch_index": index, "channel": "search",
                       "campaign": campaign, "touch_ts_ms": ts_ms - HOUR, "credit": share,
                       "revenue": revenue * share, "currency": currency,
                       "stage": "new"}).encode()


def seed_ours(url: str, revenue_currency: str = "USD") -> None:
    """Campaign 111: 100 orders on 1 March in New York, 10 of them after 19:00 there (so
    already 2 March in UTC); campaign 222: 200 orders. One GPU costing 24 USD that day."""
    messages = [credit("last_click", f"a{i}", "111", T_1500Z + i * 1000, 50.0)
                for i in range(90)]
    messages += [credit("last_click", f"b{i}", "111", T_0200Z_NEXT + i * 1000, 50.0)
                 for i in range(10)]
    messages += [credit("last_click", f"c{i}", "222", T_1500Z + i * 1000, 20.0,
                        currency=revenue_currency) for i in range(200)]
    # other models and unattributed orders must not count
    messages += [credit("linear", f"a{i}", "111", T_1500Z, 50.0, 0.5, k) for i in range(20)
                 for k in range(2)]
    messages += [credit("last_click", "z1", "(unattributed)", T_1500Z, 99.0)]
    gpu = [{"kind": "idle" if h % 2 else "call", "gpu_uuid": "GPU-A",
            "interval_start_ms": MIDNIGHT + h * HOUR, "interval_end_ms": MIDNIGHT + (h + 1) * HOUR,
            "model": "NVIDIA H100", "idle_seconds": 3600.0, "gpu_seconds": 3600.0,
            "cost_usd": 1.0, "interval_cost_usd": 1.0, "price_known": True,
            "trace_id": f"t{h}", "span_id": f"s{h}", "workload": "ranker", "pod": "ranker-0",
            "namespace": "ml", "user_id": "u"} for h in range(24)]
    with Warehouse(url) as wh:
        CreditsSink(wh).write(messages)
        GpuCostsSink(wh).write([json.dumps(g).encode() for g in gpu])
        wh.upsert("ad_spend", ("platform", "account", "campaign", "day", "amount", "currency"),
                  4, [("google_ads", ACCOUNT, "111", DAY, 500.0, "USD"),
                      ("google_ads", ACCOUNT, "222", DAY, 300.0, "USD")])


def google_report(folder: Path, name: str, conversions_111: float, mtime: float) -> Path:
    """What GoogleAdsService.SearchStream returns as JSON for the two campaigns."""
    def row(campaign: str, cost: float, conversions: float, value: float) -> dict:
        return {"customer": {"id": ACCOUNT, "currencyCode": "USD",
                             "timeZone": "America/New_York"},
                "campaign": {"id": campaign}, "segments": {"date": DAY},
                "metrics": {"costMicros": str(int(cost * 1_000_000)),
                            "conversions": conversions, "conversionsValue": value}}
    path = folder / name
    path.write_text(json.dumps([{"results": [row("111", 500.0, conversions_111, 5000.0),
                                             row("222", 300.0, 200.0, 4000.0)]}]))
    os.utime(path, (mtime, mtime))
    return path


def publish_bill(bootstrap: str, topic: str) -> None:
    """A FOCUS export on the billing topic: the VM of GPU-A, 24 hours, with a correction."""
    def line(cost: float, start: int, hours: int, charge_class: str = "") -> dict:
        return {"BillingAccountId": "acct-1", "BillingCurrency": "USD",
                "BillingPeriodStart": "2025-03-01T00:00:00Z",
                "ChargePeriodStart": f"2025-03-01T{start:02d}:00:00Z",
                "ChargePeriodEnd": f"2025-03-01T{start + hours - 1:02d}:59:59.999Z"
                if start + hours == 24 else f"2025-03-01T{start + hours:02d}:00:00Z",
                "ChargeCategory": "Usage", "ChargeClass": charge_class,
                "EffectiveCost": str(cost), "ResourceId": "vm-1",
                "ServiceProviderName": "ExampleCloud"}
    envelope = {"format": "focus", "reported_at": "2025-03-02T08:00:00Z",
                "rows": [line(12.0, 0, 12), line(12.5, 12, 12), line(-0.5, 12, 12, "Correction")]}
    sink = producer(bootstrap)
    try:
        sink.send(topic, json.dumps(envelope).encode()).get(30)
    finally:
        sink.close()


def make_config(url: str, bootstrap: str, alerts_topic: str, billing_topic: str,
                webhook_url: str, tmp_path: Path) -> ReconcileConfig:
    resource_map = tmp_path / "resources.yaml"
    resource_map.write_text("GPU-A: vm-1\n")
    config = load_reconcile_config()
    config = config.replace("warehouse", url=url).replace("kafka", bootstrap=bootstrap)
    config = config.replace("billing", topic=billing_topic)
    config = config.replace("ours", resource_map=str(resource_map))
    webhook = WebhookSection(url=webhook_url, secret=SECRET, timeout_s=2.0, retries=2,
                             backoff_s=0.05)
    return config.replace("alerts", topic=alerts_topic, webhook=webhook)


def kafka_alerts(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    return list(read_all(bootstrap, topic))


def rows_of(url: str) -> list[tuple]:
    with ReconcileStore(url) as store:
        return store.daily_rows(DAY, DAY)


# --- the end-to-end test -------------------------------------------------------------

@pytest.mark.parametrize("under_reported_pct", [7, 3])
def test_under_reported_conversions_alert_once(warehouse_url, kafka, topic, tmp_path, receiver,
                                               under_reported_pct):
    seed_ours(warehouse_url)
    alerts_topic, billing_topic = topic("alerts"), topic("billing")
    publish_bill(kafka, billing_topic)
    config = make_config(warehouse_url, kafka, alerts_topic, billing_topic, receiver.url,
                         tmp_path)
    reported = 100 * (1 - under_reported_pct / 100)
    first_report = google_report(tmp_path, "google_v1.json", reported, time.time() - 3600)
    request = ReconcileRequest(DAY, DAY, (str(first_report),), kafka)

    result = run(config, request)

    rows = {(r[0], r[3], r[5]): r for r in result.rows}
    conversions = rows[("campaign", "111", "conversions")]
    assert conversions[7:9] == (100.0, pytest.approx(reported))  # ours, theirs
    assert conversions[10] == pytest.approx((100 - reported) / reported)  # drift
    # the bill: 12 + 12.5 - 0.5 (correction) = 24 USD, our 24 hours at 1 USD
    assert rows[("gpu", "vm-1", "compute_cost")][7:9] == (24.0, pytest.approx(24.0))
    assert rows[("total", "*", "conversions")][7:9] == (300.0, pytest.approx(200 + reported))
    assert all(r[13] == "ok" for key, r in rows.items()
               if key != ("campaign", "111", "conversions"))
    assert result.counters["credits_without_account"] == 1  # the unattributed order

    expected_alerts = 1 if under_reported_pct == 7 else 0
    assert len(receiver.requests) == expected_alerts
    assert all(r["valid"] for r in receiver.requests)
    published = kafka_alerts(kafka, alerts_topic)
    assert len(published) == expected_alerts
    if expected_alerts:
        assert conversions[13] == "breach"
        (alert,) = receiver.delivered
        assert alert["kind"] == "open"
        assert alert["key"] == {"scope": "campaign", "platform": "google_ads",
                                "account": ACCOUNT, "entity": "111", "day": DAY,
                                "metric": "conversions"}
        assert (alert["ours"], alert["theirs"]) == (100.0, pytest.approx(93.0))
        assert alert["drift"] == pytest.approx(7 / 93)
        assert alert["threshold"] == 0.05
        assert len(alert["top_contributors"]) == 5
        assert alert["top_contributors"][0]["theirs"] is None  # Google has no order list
        assert receiver.requests[0]["headers"][ALERT_ID_HEADER] == alert["alert_id"]
        # the same signed bytes on Kafka, keyed by the alert's key
        key, value = published[0]
        assert value == receiver.requests[0]["raw"]
        assert key == f"campaign/google_ads/{ACCOUNT}/111/{DAY}/conversions".encode()
        (stored,) = result.alerts
        assert (stored["log_status"], stored["kafka_status"], stored["webhook_status"]) == \
            ("sent", "sent", "sent")
    else:
        assert conversions[13] == "ok" and result.alerts == []

    # a rerun of the day: identical rows, nothing sent twice
    before = rows_of(warehouse_url)
    again = run(config, request)
    assert rows_of(warehouse_url) == before
    assert again.alerts == []
    assert len(receiver.requests) == expected_alerts
    assert len(kafka_alerts(kafka, alerts_topic)) == expected_alerts
    if not expected_alerts:
        return

    # Google restates the day (taken later): back in line, the alert resolves
    restated = google_report(tmp_path, "google_v2.json", 100.0, time.time())
    resolved = run(config, replace(request, billing_files=(str(first_report), str(restated))))
    assert [a["kind"] for a in resolved.alerts] == ["resolve"]
    assert [m["kind"] for m in receiver.delivered] == ["open", "resolve"]
    assert receiver.delivered[1]["key"] == receiver.delivered[0]["key"]
    assert len(kafka_alerts(kafka, alerts_topic)) == 2
    settled = rows_of(warehouse_url)
    fixed = next(r for r in settled if (r[0], r[3], r[5]) == ("campaign", "111", "conversions"))
    assert fixed[7:9] == (100.0, 100.0) and fixed[13] == "ok"
    assert fixed[16] > conversions[16]  # reported_at of the restatement

    # an older restatement arriving late does not win
    stale = google_report(tmp_path, "google_v0.json", 80.0, time.time() - 7200)
    late = run(config, replace(request, billing_files=(str(stale),)))
    assert late.staged.ad_rows_stale == 2 and late.alerts == []
    assert rows_of(warehouse_url) == settled
    assert len(receiver.requests) == 2


def test_dead_webhook_never_blocks_and_the_next_run_delivers(kafka, topic, tmp_path, receiver):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    seed_ours(url)
    alerts_topic, billing_topic = topic("alerts"), topic("billing")
    publish_bill(kafka, billing_topic)
    dead = f"http://127.0.0.1:{closed_port()}/hook"
    config = make_config(url, kafka, alerts_topic, billing_topic, dead, tmp_path)
    report = google_report(tmp_path, "google.json", 93.0, time.time())
    request = ReconcileRequest(DAY, DAY, (str(report),), kafka)

    started = time.monotonic()
    result = run(config, request)
    assert time.monotonic() - started < 30
    (alert,) = result.alerts
    assert (alert["kafka_status"], alert["webhook_status"]) == ("sent", "failed")
    assert alert["webhook_attempts"] == 3 and "webhook:" in alert["last_error"]
    assert len(kafka_alerts(kafka, alerts_topic)) == 1
    assert len(result.rows) == 11  # the reconciliation itself went through

    # the endpoint is back: the next run delivers the pending alert, and only that
    config = config.replace("alerts", webhook=replace(config.alerts.webhook, url=receiver.url))
    run(config, request)
    assert [m["kind"] for m in receiver.delivered] == ["open"]
    assert len(kafka_alerts(kafka, alerts_topic)) == 1
    with ReconcileStore(url) as store:
        (stored,) = store.alerts()
    assert stored["webhook_status"] == "sent" and stored["webhook_attempts"] == 4


def test_webhook_retries_server_errors_and_gives_up_on_rejection():
    flaky = Receiver(SECRET, fail_first=2)
    try:
        sink = WebhookSink(flaky.url, SECRET, timeout_s=2, retries=3, backoff_s=0.01)
        message = {"alert_id": "a1", "kind": "open"}
        delivery = sink.write(message)
        assert (delivery.ok, delivery.attempts) == (True, 3)
        assert [r["valid"] for r in flaky.requests] == [True, True, True]
        # a receiver with another key answers 401: a permanent failure, not retried
        wrong = WebhookSink(flaky.url, Secret("other-key"), timeout_s=2, retries=3,
                            backoff_s=0.01)
        rejected = wrong.write(message)
        assert (rejected.ok, rejected.permanent, rejected.attempts) == (False, True, 1)
        assert rejected.error == "HTTP 401"
    finally:
        flaky.close()


# --- through the command line --------------------------------------------------------

def test_cli_reconciles_a_day_and_prints_the_summary(kafka, topic, tmp_path, receiver,
                                                    monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    seed_ours(url, revenue_currency="EUR")
    alerts_topic = topic("alerts")
    report = google_report(tmp_path, "google.json", 93.0, time.time())
    config_file = tmp_path / "reconcile.yaml"
    config_file.write_text(f"alerts:\n  topic: {alerts_topic}\n")
    monkeypatch.setenv("SEEDANCE_WAREHOUSE_URL", url)
    monkeypatch.setenv("SEEDANCE_WEBHOOK_URL", receiver.url)
    monkeypatch.setenv("SEEDANCE_WEBHOOK_SECRET", SECRET.reveal())
    argv = ["reconcile", "--date", DAY, "--billing", f"google_ads:{report}", "--config",
            str(config_file), "--bootstrap", kafka]

    # campaign 222's revenue is in EUR, Google's in USD: an error naming the key
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"google_ads/{ACCOUNT}/222 {DAY} revenue: amounts in EUR and USD cannot be " \
           "compared without a rate table" in err
    assert "while running" not in err and "Traceback" not in err

    config_file.write_text(f"alerts:\n  topic: {alerts_topic}\n"
                           "currency:\n  reporting: USD\n  rates: {EUR: 1.0}\n")
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"{DAY}: " in out and "1 alerts opened" in out  # progress per day
    assert f"{DAY}  conversions" in out and "+2.39%" in out  # the day's total
    assert "alerts: 1 opened, 0 resolved" in out
    assert "[log sent, kafka sent, webhook sent]" in out
    assert SECRET.reveal() not in out + err
    assert len(receiver.delivered) == 1 and len(kafka_alerts(kafka, alerts_topic)) == 1


# --- staging: the latest restatement wins --------------------------------------------

FOCUS_HEADER = ("BillingAccountId,BillingCurrency,BillingPeriodStart,ChargePeriodStart,"
                "ChargePeriodEnd,ChargeCategory,ChargeClass,EffectiveCost,ResourceId\n")


def focus_file(folder: Path, name: str, lines: list[str], mtime: float) -> Path:
    path = folder / name
    path.write_text(FOCUS_HEADER + "".join(f"acct-1,USD,2025-03-01T00:00:00Z,{line}\n"
                                           for line in lines))
    os.utime(path, (mtime, mtime))
    return path


def cloud_costs(store: ReconcileStore) -> dict[str, float]:
    totals: dict[str, float] = {}
    for resource, _day, _cur, cost, *_ in store.their_cloud_costs(DAY, DAY, ("Usage",)):
        totals[resource] = round(totals.get(resource, 0.0) + cost, 9)
    return totals


def test_focus_exports_replace_their_billing_period(warehouse_url, tmp_path):
    from pipelines.reconcile.billing import read_file

    day = "2025-03-01T00:00:00Z,2025-03-02T00:00:00Z,Usage"
    now = time.time()
    first = focus_file(tmp_path, "march_v1.csv", [f"{day},,10.0,vm-1", f"{day},,5.0,vm-2"],
                       now - 100)
    with ReconcileStore(warehouse_url) as store:
        store.stage(read_file(first))
        store.stage(read_file(first))  # the same export again replaces itself
        assert cloud_costs(store) == {"vm-1": 10.0, "vm-2": 5.0}
        # the next export of March: vm-2 is gone, a correction lowers vm-1's 1 March
        second = focus_file(tmp_path, "march_v2.csv",
                            [f"{day},,10.0,vm-1", f"{day},Correction,-1.5,vm-1"], now)
        assert store.stage(read_file(second)).cloud_rows == 1
        assert cloud_costs(store) == {"vm-1": 8.5}
        # an export older than the staged one does not win
        stale = store.stage(read_file(first))
        assert stale.periods_stale == 1 and "older than the export" in stale.stale[0]
        assert cloud_costs(store) == {"vm-1": 8.5}


def test_billing_topic_is_staged_once_and_a_bad_message_is_reported(kafka, topic, tmp_path):
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    billing = topic("billing")
    sink = producer(kafka)
    try:
        sink.send(billing, b'{"format": "meta", "rows": [{"spend": "x"}]}').get(30)
        sink.send(billing, json.dumps({"format": "generic", "reported_at": "2025-03-02T00:00Z",
                                       "rows": [{"platform": "tiktok", "account_id": "7",
                                                 "currency": "USD", "campaign_id": "c",
                                                 "date": DAY, "spend": "5", "conversions": 1,
                                                 "conversion_value": 2}]}).encode()).get(30)
    finally:
        sink.close()
    from pipelines.reconcile.billing.kafka_source import stage_topic
    from pipelines.reconcile.billing.sources import ParseOptions

    with ReconcileStore(url) as store:
        result = stage_topic(store, kafka, billing, ParseOptions())
        assert (result.messages, result.staged.ad_rows) == (1, 1)
        (bad,) = result.invalid
        assert f"{billing}[0]@0: rows[0]: spend: not a number: 'x'" in bad
        assert f"{billing}[0]@0: rows[0]: account_id: missing" in bad
        assert store.their_ad_rows(DAY, DAY)[0][:4] == ("tiktok", "7", "c", DAY)
        again = stage_topic(store, kafka, billing, ParseOptions())  # from the stored offsets
        assert (again.messages, again.invalid) == (0, [])


def test_an_undelivered_alert_fails_the_run_and_its_url_token_stays_hidden(
        kafka, topic, tmp_path, monkeypatch, capsys):
    import sqlite3

    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    seed_ours(url)
    report = google_report(tmp_path, "google.json", 93.0, time.time())
    config_file = tmp_path / "reconcile.yaml"
    config_file.write_text(f"alerts:\n  topic: {topic('alerts')}\n"
                           "  webhook:\n    retries: 2\n    backoff_s: 0.01\n"
                           "currency:\n  reporting: USD\n  rates: {EUR: 1.0}\n")
    dead = "http://127.0.0.1:9/services/T000/B000/TOKENSECRET?token=s3cr3t"  # nothing listens
    monkeypatch.setenv("SEEDANCE_WAREHOUSE_URL", url)
    monkeypatch.setenv("SEEDANCE_WEBHOOK_URL", dead)
    monkeypatch.setenv("SEEDANCE_WEBHOOK_SECRET", SECRET.reveal())
    argv = ["reconcile", "--date", DAY, "--billing", f"google_ads:{report}", "--config",
            str(config_file), "--bootstrap", kafka]
    assert main(argv) == 1  # an alert that reached no one is a failed run
    out, err = capsys.readouterr()
    assert "webhook 0 sent, 1 failed, 2 retries" in out
    assert "1 alert deliveries failed" in err
    for secret in ("TOKENSECRET", "s3cr3t"):
        assert secret not in out + err
    with sqlite3.connect(tmp_path / "warehouse.db") as db:
        (error,) = db.execute("SELECT last_error FROM alerts").fetchone()
    assert error.startswith("webhook:") and "TOKENSECRET" not in error and "s3cr3t" not in error
