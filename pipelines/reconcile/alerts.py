"""Alert sinks — the log, a Kafka topic, a signed webhook — and the outbox dispatcher.

The Beam job only records alert events in the warehouse (table `alerts`); `dispatch` then
delivers each event to every configured sink once and records where it went, so a rerun
sends nothing twice and an undelivered event is retried by the next run. The webhook body
is the same JSON as the Kafka value, signed with HMAC-SHA256 over the raw bytes in
`X-Seedance-Signature: sha256=<hex>`. A dead webhook costs one alert's retries per run,
never the pipeline: after that, the run's remaining webhook deliveries wait for the next.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests

from pipelines.reconcile.config import AlertsSection
from pipelines.reconcile.store import ReconcileStore
from pipelines.settings.sections import Secret

log = logging.getLogger("seedance.alerts")
SIGNATURE_HEADER = "X-Seedance-Signature"
ALERT_ID_HEADER = "X-Seedance-Alert-Id"
KEY_FIELDS = ("scope", "platform", "account", "entity", "day", "metric")


def payload(alert: dict[str, Any]) -> dict[str, Any]:
    """The alert as receivers see it: key, both values, drift, threshold, contributors."""
    drift = alert["drift"]
    return {
        "alert_id": alert["alert_id"],
        "kind": alert["kind"],  # open | resolve
        "key": {f: alert[f] for f in KEY_FIELDS},
        "seq": alert["seq"],
        "currency": alert["currency"],
        "ours": alert["ours"],
        "theirs": alert["theirs"],
        "drift": drift,  # null: theirs is 0 while ours is not (infinite drift)
        "threshold": alert["threshold"],
        "min_volume": alert["min_volume"],
        "top_contributors": json.loads(alert["contributors"]),
        "summary": summary(alert),
        "run_id": alert["run_id"],
        "raised_at": alert["raised_at"],
    }


def summary(alert: dict[str, Any]) -> str:
    label = "/".join(str(alert[f]) for f in ("platform", "account", "entity") if alert[f])
    drift = alert["drift"]
    shown = "theirs is 0" if drift is None and alert["ours"] else \
        f"{0.0 if abs(drift) < 5e-5 else drift:+.2%}" \
        if drift is not None and math.isfinite(drift) else "n/a"
    verb = "drift" if alert["kind"] == "open" else "resolved, now"
    currency = f" {alert['currency']}" if alert["currency"] else ""
    return (f"{alert['scope']} {label} {alert['day']} {alert['metric']}: {verb} {shown} "
            f"(ours {_amount(alert['ours'])}, theirs {_amount(alert['theirs'])}{currency}; "
            f"threshold {alert['threshold']:.1%})")


def _amount(value: float | None) -> str:
    return "missing" if value is None else f"{value:,.2f}"


def body(message: dict[str, Any]) -> bytes:
    """Canonical bytes: the same alert always serialises (and signs) the same."""
    return json.dumps(message, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: Secret, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.reveal().encode(), raw, hashlib.sha256).hexdigest()


def verify(secret: Secret, raw: bytes, header: str) -> bool:
    """For receivers (and the tests): constant-time check of the signature header."""
    return hmac.compare_digest(sign(secret, raw), header or "")


@dataclass
class Delivery:
    ok: bool
    attempts: int = 1
    error: str = ""
    permanent: bool = False  # a 4xx other than 408/429: retrying the same body is futile


def redacted(text: str, url: str) -> str:
    """`text` with what of the webhook `url` can carry a token (its path, query and any
    password: Slack-style and ?token= URLs alike) replaced by ***; the host stays."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return text.replace(url, "***") if url else text
    out = text.replace(url, f"{parts.scheme}://{host}{port}/***")
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    for piece in (tail, parts.query, parts.path, parts.password or "", parts.username or ""):
        if len(piece) > 1:
            out = out.replace(piece, "/***" if piece.startswith("/") else "***")
    return out


class WebhookSink:
    """POST JSON with retries and doubling backoff on timeouts, connection errors, 408,
    429 and 5xx. Once one alert has used up its retries, the sink is down for the run."""

    def __init__(self, url: str, secret: Secret, timeout_s: float = 5.0, retries: int = 3,
                 backoff_s: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> None:
        self.url, self.secret = url, secret
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.sleep = sleep
        self.down = ""  # why, once the endpoint stopped answering in this run
        self.session = requests.Session()

    def write(self, message: dict[str, Any]) -> Delivery:
        if self.down:
            return Delivery(False, 0, f"not tried: {self.down}")
        raw = body(message)
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(self.secret, raw),
                   ALERT_ID_HEADER: message["alert_id"], "User-Agent": "seedance-reconcile"}
        error = ""
        for attempt in range(1, self.retries + 2):
            try:
                response = self.session.post(self.url, data=raw, headers=headers,
                                             timeout=self.timeout_s)
                if 200 <= response.status_code < 300:
                    return Delivery(True, attempt)
                error = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code not in (408, 429):
                    return Delivery(False, attempt, error, permanent=True)
            except requests.RequestException as exc:
                # requests names the URL in its errors: never print or store a token
                error = redacted(f"{type(exc).__name__}: {exc}", self.url)
            if attempt <= self.retries:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
        self.down = f"webhook failed {self.retries + 1} times ({error})"
        return Delivery(False, self.retries + 1, error)

    def close(self) -> None:
        self.session.close()


class KafkaSink:
    """One message per alert on the alerts topic, keyed by the alert's key (so a key's
    open and resolve stay in order on one partition)."""

    def __init__(self, bootstrap: str, topic: str, properties: dict[str, str] | None = None,
                 timeout_s: float = 10.0) -> None:
        self.topic, self.timeout_s = topic, timeout_s
        self.error = ""
        self.producer: Any = None
        try:
            from pipelines.kafka.io import producer

            self.producer = producer(bootstrap, max_block_ms=int(timeout_s * 1000),
                                     request_timeout_ms=int(timeout_s * 1000),
                                     **(properties or {}))
        except Exception as exc:  # kafka-python raises several types for an absent broker
            self.error = f"{type(exc).__name__}: {exc}"

    def write(self, message: dict[str, Any]) -> Delivery:
        if self.producer is None:
            return Delivery(False, 0, f"Kafka unavailable: {self.error}")
        key = "/".join(str(message["key"][f]) for f in KEY_FIELDS).encode()
        try:
            self.producer.send(self.topic, key=key, value=body(message),
                               headers=[("alert_id", message["alert_id"].encode()),
                                        ("kind", message["kind"].encode())]
                               ).get(self.timeout_s)
            return Delivery(True)
        except Exception as exc:
            return Delivery(False, 1, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=self.timeout_s)


@dataclass
class DispatchReport:
    sent: dict[str, int] = field(default_factory=lambda: {"log": 0, "kafka": 0, "webhook": 0})
    failed: dict[str, int] = field(default_factory=lambda: {"kafka": 0, "webhook": 0})
    errors: list[str] = field(default_factory=list)
    retries: int = 0  # webhook attempts after the first, in this run


def dispatch(store: ReconcileStore, config: AlertsSection, bootstrap: str = "",
             kafka_properties: dict[str, str] | None = None,
             webhook: WebhookSink | None = None) -> DispatchReport:
    """Deliver every alert event that has not reached all of its sinks yet."""
    report = DispatchReport()
    pending = store.undelivered()
    if not pending:
        return report
    kafka: KafkaSink | None = None
    if any(a["kafka_status"] in ("pending", "failed") for a in pending) and config.topic:
        kafka = KafkaSink(bootstrap, config.topic, kafka_properties) if bootstrap else None
    if webhook is None and config.webhook.url:
        w = config.webhook
        webhook = WebhookSink(w.url, w.secret, w.timeout_s, w.retries, w.backoff_s)
    try:
        for alert in pending:
            message = payload(alert)
            if alert["log_status"] == "pending":
                log.warning("%s %s", "ALERT" if alert["kind"] == "open" else "RESOLVED",
                            message["summary"])
                store.mark(alert["alert_id"], log_status="sent")
                report.sent["log"] += 1
            if alert["kafka_status"] in ("pending", "failed"):
                result = kafka.write(message) if kafka else Delivery(
                    False, 0, "no Kafka bootstrap or alerts.topic configured")
                _record(store, report, alert, "kafka", result)
            if alert["webhook_status"] in ("pending", "failed"):
                result = webhook.write(message) if webhook else Delivery(
                    False, 0, "no alerts.webhook.url configured")
                _record(store, report, alert, "webhook", result)
    finally:
        if kafka:
            kafka.close()
        if webhook:
            webhook.close()
    return report


def _record(store: ReconcileStore, report: DispatchReport, alert: dict[str, Any], sink: str,
            result: Delivery) -> None:
    status = "sent" if result.ok else "rejected" if result.permanent else "failed"
    columns: dict[str, object] = {f"{sink}_status": status}
    if sink == "webhook":
        columns["webhook_attempts"] = int(alert["webhook_attempts"]) + result.attempts
        report.retries += max(0, result.attempts - 1)
    if not result.ok:
        columns["last_error"] = f"{sink}: {result.error}"[:500]
        report.failed[sink] += 1
        report.errors.append(f"{alert['alert_id'][:12]} {sink}: {result.error}")
    else:
        report.sent[sink] += 1
    store.mark(alert["alert_id"], **columns)
