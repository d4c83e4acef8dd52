"""The control loop's request signature (pipelines/control/signing.py): over method, path,
timestamp, idempotency key and body; a receiver refuses what was changed, what is stale and
acknowledges without acting what it accepted before."""

from __future__ import annotations

import hashlib
import hmac

from pipelines.control.signing import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    ReplayGuard,
    signed_headers,
    verify_request,
)
from pipelines.settings.sections import Secret

SECRET = Secret("s3cr3t")
URL = "https://ads.example.com/hooks/budget?token=x"
RAW = b'{"action":"budget_change","action_id":"a1"}'
NOW = 1_780_000_000.0


def test_the_signature_is_hmac_sha256_over_the_canonical_string() -> None:
    headers = signed_headers(SECRET, URL, "a1", RAW, now_s=NOW)
    expected = hmac.new(b"s3cr3t", b"v1\n1780000000\nPOST\n/hooks/budget\na1\n" + RAW,
                        hashlib.sha256).hexdigest()
    assert headers == {TIMESTAMP_HEADER: "1780000000", IDEMPOTENCY_HEADER: "a1",
                       SIGNATURE_HEADER: f"v1={expected}"}


def test_a_receiver_refuses_what_was_changed_or_is_stale_and_does_not_act_twice() -> None:
    headers = signed_headers(SECRET, URL, "a1", RAW, now_s=NOW)
    guard = ReplayGuard()
    first = verify_request(SECRET, "POST", "/hooks/budget", headers, RAW, guard, NOW + 5)
    assert first.act
    # the same request again (a retry, a replay): genuine, not acted on
    again = verify_request(SECRET, "POST", "/hooks/budget", headers, RAW, guard, NOW + 6)
    assert again.genuine and again.repeated and not again.act
    # a captured request with a new idempotency key: the signature covers the key
    fresh_key = {**headers, IDEMPOTENCY_HEADER: "a2"}
    assert verify_request(SECRET, "POST", "/hooks/budget", fresh_key, RAW, guard,
                          NOW + 7).reason == "signature does not match"
    for method, path, raw in (("POST", "/hooks/scale", RAW), ("PUT", "/hooks/budget", RAW),
                              ("POST", "/hooks/budget", RAW + b" ")):
        assert not verify_request(SECRET, method, path, headers, raw, guard, NOW).genuine
    # later than the tolerance: refused, even with a valid signature
    stale = verify_request(SECRET, "POST", "/hooks/budget", headers, RAW, ReplayGuard(),
                           NOW + 301)
    assert not stale.genuine and "stale or replayed" in stale.reason
    lower = {name.lower(): value for name, value in headers.items()}
    assert verify_request(SECRET, "POST", "/hooks/budget", lower, RAW, ReplayGuard(),
                          NOW).act
    assert not verify_request(Secret("other"), "POST", "/hooks/budget", headers, RAW,
                              ReplayGuard(), NOW).genuine
    assert verify_request(SECRET, "POST", "/hooks/budget", {}, RAW, None, NOW).reason \
        == f"no valid {TIMESTAMP_HEADER} header"


def test_the_guard_forgets_keys_after_twice_the_tolerance() -> None:
    guard = ReplayGuard(tolerance_s=10)
    assert guard.first_time("k", 100) and not guard.first_time("k", 115)
    assert guard.first_time("k", 125)
