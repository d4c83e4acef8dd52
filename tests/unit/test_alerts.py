"""Alert messages, their signature, and the webhook's retry and give-up rules (with a
recording stand-in for the HTTP session; the real receiver is in the integration test)."""

import hashlib
import hmac
import json

import requests

from pipelines.reconcile.alerts import (
    SIGNATURE_HEADER,
    WebhookSink,
    body,
    payload,
    sign,
    summary,
    verify,
)
from pipelines.settings.sections import Secret

ALERT = {"alert_id": "a" * 32, "kind": "open", "scope": "campaign", "platform": "google_ads",
         "account": "1", "entity": "111", "day": "2025-03-01", "metric": "conversions",
         "seq": 1, "currency": "", "ours": 100.0, "theirs": 93.0, "drift": 7 / 93,
         "threshold": 0.05, "min_volume": 5.0,
         "contributors": '[{"name": "o1", "ours": 1.0, "theirs": null}]',
         "run_id": "r1", "raised_at": "2025-03-02T06:00:00+00:00"}


def test_payload_carries_key_values_drift_threshold_and_contributors():
    message = payload(ALERT)
    assert message["key"] == {"scope": "campaign", "platform": "google_ads", "account": "1",
                              "entity": "111", "day": "2025-03-01", "metric": "conversions"}
    assert (message["ours"], message["theirs"], message["threshold"]) == (100.0, 93.0, 0.05)
    assert message["top_contributors"] == [{"name": "o1", "ours": 1.0, "theirs": None}]
    assert message["summary"] == ("campaign google_ads/1/111 2025-03-01 conversions: drift "
                                  "+7.53% (ours 100.00, theirs 93.00; threshold 5.0%)")


def test_summary_of_infinite_drift_and_of_a_resolve():
    assert "theirs is 0" in summary({**ALERT, "drift": None, "theirs": 0.0})
    resolved = summary({**ALERT, "kind": "resolve", "drift": 0.0, "theirs": 100.0,
                        "currency": "USD", "metric": "spend"})
    assert "resolved, now +0.00% (ours 100.00, theirs 100.00 USD;" in resolved


def test_signature_is_hmac_sha256_over_the_raw_body():
    raw = body(payload(ALERT))
    assert raw == body(json.loads(raw))  # canonical: parse and serialise again, same bytes
    expected = hmac.new(b"k3y", raw, hashlib.sha256).hexdigest()
    assert sign(Secret("k3y"), raw) == f"sha256={expected}"
    assert verify(Secret("k3y"), raw, f"sha256={expected}")
    assert not verify(Secret("other"), raw, f"sha256={expected}")
    assert not verify(Secret("k3y"), raw + b" ", f"sha256={expected}")


class Response:
    def __init__(self, status):
        self.status_code = status


class Session:
    """Answers from a script: an int is a status, an exception is raised."""

    def __init__(self, script):
        self.script, self.calls = list(script), []

    def post(self, url, data, headers, timeout):
        self.calls.append((url, data, headers, timeout))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return Response(step)

    def close(self):
        pass


def sink(script, retries=3):
    waits = []
    webhook = WebhookSink("http://hook.example/x", Secret("k"), timeout_s=2, retries=retries,
                          backoff_s=0.5, sleep=waits.append)
    webhook.session = Session(script)  # type: ignore[assignment]
    return webhook, waits


def test_retries_with_doubling_backoff_then_delivers_signed():
    webhook, waits = sink([requests.ConnectionError("refused"), 503, 429, 204])
    delivery = webhook.write(payload(ALERT))
    assert (delivery.ok, delivery.attempts) == (True, 4)
    assert waits == [0.5, 1.0, 2.0]
    raw = webhook.session.calls[-1][1]
    assert verify(Secret("k"), raw, webhook.session.calls[-1][2][SIGNATURE_HEADER])
    assert {c[3] for c in webhook.session.calls} == {2}  # the timeout on every attempt


def test_a_dead_webhook_costs_one_alert_per_run_and_a_4xx_is_not_retried():
    webhook, waits = sink([requests.Timeout("slow")] * 3, retries=2)
    first = webhook.write(payload(ALERT))
    assert (first.ok, first.attempts, first.permanent) == (False, 3, False)
    second = webhook.write(payload(ALERT))
    assert (second.attempts, second.error.startswith("not tried: webhook failed 3 times")) == \
        (0, True)
    assert len(webhook.session.calls) == 3 and waits == [0.5, 1.0]
    rejected, _ = sink([400])
    result = rejected.write(payload(ALERT))
    assert (result.ok, result.permanent, result.attempts, result.error) == \
        (False, True, 1, "HTTP 400")
