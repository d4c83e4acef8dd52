"""Executors of the control loop's decisions, and the one way an action runs (`run_action`).

webhook    POST JSON {action_id, decision_id, rule, target, action, parameters, reason},
           signed over method, path, timestamp, idempotency key (the action_id) and body
           (pipelines/control/signing.py; receivers check with its verify_request);
           retried with doubling backoff on connection errors, timeouts, 408, 429 and 5xx,
           each attempt signed anew; a 2xx is success, another 4xx fails at once.
warehouse  always on: the action is its control_actions row, for whatever applies budgets
           or node counts to read (with no webhook configured, this is the executor).

`run_action` claims the action in the control_actions table before anything is sent (a row
with status `sending`, inserted only if the action_id is not there): a crash mid-request or
a second process on the same decision never sends it twice. An action_id recorded there is
never executed again, whatever its outcome; `seedance control retry` executes a failed or
dry-run decision again on purpose, as a new action. The secret is never logged or stored; errors are
redacted of the URL's path and query (where tokens live).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import requests

from pipelines.control.ledger import Ledger, iso
from pipelines.control.signing import signed_headers
from pipelines.reconcile.alerts import body, redacted
from pipelines.settings.shared import WebhookSection
from schemas.rows import CONTROL_ACTION

log = logging.getLogger("seedance.control")
REQUEST_FIELDS = ("action_id", "decision_id", "rule", "target", "action", "parameters",
                  "reason")


@dataclass(frozen=True)
class Outcome:
    ok: bool
    attempts: int
    response: str  # status line or error, shortened, secrets redacted


class Executor(Protocol):
    name: str

    def execute(self, request: dict[str, Any]) -> Outcome: ...


class WarehouseExecutor:
    """The action is recorded (its control_actions row is the write); nothing is sent."""

    name = "warehouse"

    def execute(self, request: dict[str, Any]) -> Outcome:
        return Outcome(True, 1, "recorded in control_actions")


class WebhookExecutor:
    name = "webhook"

    def __init__(self, section: WebhookSection,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.section, self.sleep = section, sleep
        self.session = requests.Session()

    def execute(self, request: dict[str, Any]) -> Outcome:
        raw = body({name: request[name] for name in REQUEST_FIELDS})
        hook = self.section
        error = ""
        for attempt in range(1, hook.retries + 2):
            headers = {"Content-Type": "application/json", "User-Agent": "seedance-control",
                       **signed_headers(hook.secret, hook.url, str(request["action_id"]), raw)}
            try:
                answer = self.session.post(hook.url, data=raw, headers=headers,
                                           timeout=hook.timeout_s)
                status = f"HTTP {answer.status_code} {answer.reason or ''}".strip()
                if 200 <= answer.status_code < 300:
                    return Outcome(True, attempt, status)
                error = status
                if answer.status_code < 500 and answer.status_code not in (408, 429):
                    return Outcome(False, attempt, status)  # the same body fails again
            except requests.RequestException as exc:
                error = redacted(f"{type(exc).__name__}: {exc}", hook.url)
            log.info("webhook attempt %d of action %s failed: %s", attempt,
                     request["action_id"], error)
            if attempt <= hook.retries:
                self.sleep(hook.backoff_s * 2 ** (attempt - 1))
        return Outcome(False, hook.retries + 1, error[:300])

    def close(self) -> None:
        self.session.close()


def run_action(ledger: Ledger, executor: Executor, request: dict[str, Any], now_ms: int,
               settle_s: float) -> tuple[dict[str, Any], bool]:
    """Execute `request` once: (its control_actions row, whether it ran now). An action_id
    already in the table is returned as recorded, not executed again."""
    action_id = str(request["action_id"])
    known = ledger.action(action_id)
    if known is not None:
        return known, False
    row = {"action_id": request["action_id"], "decision_id": request["decision_id"],
           "executor": executor.name, "status": "sending", "attempts": 0,
           "response": "claimed; not answered yet (if this stays, the sender stopped "
                       "mid-request: check the receiver, then `seedance control retry`)",
           "executed_at": iso(now_ms), "verify_after": iso(now_ms + int(settle_s * 1000))}
    if not ledger.claim(CONTROL_ACTION, row):  # another process claimed it first
        claimed = ledger.action(action_id)
        assert claimed is not None
        return claimed, False
    outcome = executor.execute(request)
    row.update(status="succeeded" if outcome.ok else "failed", attempts=outcome.attempts,
               response=outcome.response[:300])
    ledger.record(CONTROL_ACTION, row)
    return row, True
