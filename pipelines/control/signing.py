"""Signed control-loop requests, and what a receiver checks (as Stripe and GitHub sign
their webhooks).

The signature is HMAC-SHA256 with the shared secret over one canonical string:

    v1 \\n <timestamp> \\n <METHOD> \\n <path> \\n <idempotency key> \\n <body>

sent as `X-Seedance-Signature: v1=<hex>`, with `X-Seedance-Timestamp: <unix seconds>` and
`Idempotency-Key: <action id>`. Everything a receiver acts on is inside it: a captured
request cannot be sent to another path, given a new idempotency key or replayed later
(`verify_request` refuses a timestamp further than `tolerance_s` from its clock; a key
already accepted within twice that, `ReplayGuard`, is acknowledged without acting again).
A retry signs again with a new timestamp and the same key.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from pipelines.settings.sections import Secret

SIGNATURE_HEADER = "X-Seedance-Signature"
TIMESTAMP_HEADER = "X-Seedance-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
VERSION = "v1"
TOLERANCE_S = 300  # a receiver's default: requests older or newer than this are refused


def canonical(method: str, path: str, timestamp: int, key: str, raw: bytes) -> bytes:
    return "\n".join((VERSION, str(timestamp), method.upper(), path or "/", key)).encode() \
        + b"\n" + raw


def signature(secret: Secret, method: str, path: str, timestamp: int, key: str,
              raw: bytes) -> str:
    digest = hmac.new(secret.reveal().encode(), canonical(method, path, timestamp, key, raw),
                      hashlib.sha256).hexdigest()
    return f"{VERSION}={digest}"


def signed_headers(secret: Secret, url: str, key: str, raw: bytes,
                   now_s: float | None = None, method: str = "POST") -> dict[str, str]:
    """The headers of one attempt to POST `raw` to `url` (the path is signed, not the host:
    a proxy may rewrite that)."""
    timestamp = int(time.time() if now_s is None else now_s)
    return {TIMESTAMP_HEADER: str(timestamp), IDEMPOTENCY_HEADER: key,
            SIGNATURE_HEADER: signature(secret, method, urlsplit(url).path, timestamp, key,
                                        raw)}


class ReplayGuard:
    """The idempotency keys a receiver has accepted, kept for twice the tolerance (a key
    older than that comes with a timestamp that is refused anyway)."""

    def __init__(self, tolerance_s: float = TOLERANCE_S) -> None:
        self.tolerance_s = tolerance_s
        self.seen: dict[str, float] = {}

    def first_time(self, key: str, now_s: float) -> bool:
        horizon = now_s - 2 * self.tolerance_s
        self.seen = {k: at for k, at in self.seen.items() if at >= horizon}
        if key in self.seen:
            return False
        self.seen[key] = now_s
        return True


class Check(NamedTuple):
    """A receiver's verdict on one request: refuse it (not genuine or not fresh: answer 401
    and do nothing), acknowledge it without acting again (a retry or replay of a key
    already accepted: answer as the first time) or act on it."""

    genuine: bool
    repeated: bool
    reason: str

    @property
    def act(self) -> bool:
        return self.genuine and not self.repeated


def verify_request(secret: Secret, method: str, path: str, headers: Mapping[str, str],
                   raw: bytes, guard: ReplayGuard | None = None,
                   now_s: float | None = None) -> Check:
    """A receiver's check of one request: its signature over method, path, timestamp, key
    and body; its timestamp within the tolerance of this clock; and (with a guard) whether
    its idempotency key was accepted before. Header names are matched without regard to
    case."""
    found = {name.lower(): value for name, value in headers.items()}
    now = time.time() if now_s is None else now_s
    tolerance = guard.tolerance_s if guard is not None else TOLERANCE_S
    try:
        timestamp = int(found.get(TIMESTAMP_HEADER.lower(), ""))
    except ValueError:
        return Check(False, False, f"no valid {TIMESTAMP_HEADER} header")
    key = found.get(IDEMPOTENCY_HEADER.lower(), "")
    expected = signature(secret, method, path, timestamp, key, raw)
    if not hmac.compare_digest(expected, found.get(SIGNATURE_HEADER.lower(), "")):
        return Check(False, False, "signature does not match")
    if abs(now - timestamp) > tolerance:
        return Check(False, False, f"timestamp {timestamp} is more than {tolerance:g} s from "
                                   "now: stale or replayed")
    if guard is not None and not guard.first_time(key, now):
        return Check(True, True, f"idempotency key {key} accepted before: not acted on again")
    return Check(True, False, "genuine")
