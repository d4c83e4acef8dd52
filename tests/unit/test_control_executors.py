"""The control loop's executors against a real local HTTP server (http.server in a thread):
signed requests, retries on 500 then success, no retry on a 4xx, idempotency by action_id
(checked in control_actions before anything is sent), and the secret nowhere but in the
signature."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pipelines.control.executors import WarehouseExecutor, WebhookExecutor, run_action
from pipelines.control.ledger import Ledger, MemoryPublisher
from pipelines.control.signing import ReplayGuard, verify_request
from pipelines.reconcile.config import WebhookSection
from pipelines.settings.sections import Secret
from pipelines.store.warehouse import Warehouse
from tests.control_inputs import Receiver

SECRET = "very-secret-key-42"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def ledger(tmp_path) -> Iterator[Ledger]:
    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        yield Ledger(warehouse, MemoryPublisher())


def request(action_id: str = "a1") -> dict[str, Any]:
    return {"action_id": action_id, "decision_id": "d1", "rule": "cut_budget_low_roi",
            "target": "spring_sale", "action": "budget_change",
            "parameters": {"percent": -20.0, "requested_percent": -20.0},
            "reason": "roi < 1.0 on 3 day(s)"}


def webhook(url: str, retries: int = 3) -> tuple[WebhookExecutor, list[float]]:
    waits: list[float] = []
    section = WebhookSection(url, Secret(SECRET), timeout_s=2, retries=retries, backoff_s=0.1)
    return WebhookExecutor(section, sleep=waits.append), waits


def test_signed_request_with_idempotency_key(receiver, ledger):
    executor, _ = webhook(receiver.url)
    row, ran = run_action(ledger, executor, request(), 1_715_342_400_000, 300)
    assert ran and row["status"] == "succeeded" and row["attempts"] == 1
    assert row["executor"] == "webhook" and row["response"].startswith("HTTP 200")
    assert row["verify_after"] == "2024-05-10T12:05:00.000+00:00"
    (sent,) = receiver.requests
    assert json.loads(sent["raw"]) == request()
    assert sent["headers"]["Idempotency-Key"] == "a1"
    guard = ReplayGuard()
    assert verify_request(Secret(SECRET), "POST", sent["path"], sent["headers"], sent["raw"],
                          guard).act
    assert not verify_request(Secret("other"), "POST", sent["path"], sent["headers"],
                              sent["raw"]).genuine
    assert ledger.action("a1") == row


def test_retries_on_500_then_success(receiver, ledger):
    receiver.answers = [500, 503]
    executor, waits = webhook(receiver.url)
    row, _ = run_action(ledger, executor, request(), 0, 0)
    assert row["status"] == "succeeded" and row["attempts"] == 3
    assert waits == [0.1, 0.2]  # doubling backoff
    assert len({r["headers"]["Idempotency-Key"] for r in receiver.requests}) == 1
    assert len(receiver.requests) == 3


def test_a_4xx_is_not_retried_and_fails(receiver, ledger):
    receiver.answers = [400]
    executor, waits = webhook(receiver.url)
    row, _ = run_action(ledger, executor, request(), 0, 0)
    assert (row["status"], row["attempts"], waits) == ("failed", 1, [])
    assert row["response"].startswith("HTTP 400")


def test_retries_run_out(receiver, ledger):
    receiver.answers = [500] * 3
    executor, waits = webhook(receiver.url, retries=2)
    row, _ = run_action(ledger, executor, request(), 0, 0)
    assert (row["status"], row["attempts"], len(waits)) == ("failed", 3, 2)


def test_the_same_action_id_is_never_sent_twice(receiver, ledger):
    executor, _ = webhook(receiver.url)
    first, ran = run_action(ledger, executor, request(), 0, 0)
    again, ran_again = run_action(ledger, executor, request(), 10_000, 0)
    assert ran and not ran_again and again == first
    assert len(receiver.requests) == 1
    receiver.answers = [400]
    failed, _ = run_action(ledger, executor, request("a2"), 0, 0)
    retried, ran = run_action(ledger, executor, request("a2"), 0, 0)
    assert failed["status"] == "failed" and not ran and len(receiver.requests) == 2


def test_the_secret_is_in_no_log_row_or_message(receiver, ledger, caplog):
    caplog.set_level(logging.DEBUG)
    receiver.answers = [500, 500, 500, 500]
    executor, _ = webhook(receiver.url)
    run_action(ledger, executor, request("a1"), 0, 0)
    dead, _ = webhook("http://127.0.0.1:9/hooks/T0K3N?token=abc", retries=1)
    row, _ = run_action(ledger, dead, request("a2"), 0, 0)
    assert row["status"] == "failed" and "ConnectionError" in row["response"]
    stored = json.dumps(ledger.warehouse.query("SELECT * FROM control_actions"))
    published = json.dumps(ledger.publisher.messages)  # type: ignore[attr-defined]
    for text in (caplog.text, stored, published):
        assert SECRET not in text
    assert "T0K3N" not in stored and "abc" not in row["response"]
    assert "Secret('***')" in repr(executor.section)


def test_the_warehouse_executor_records_the_action(ledger):
    row, ran = run_action(ledger, WarehouseExecutor(), request(), 0, 60)
    assert ran and (row["executor"], row["status"]) == ("warehouse", "succeeded")
    # claimed, then its outcome: both on the topic, in that order
    claim, message = ledger.publisher.messages  # type: ignore[attr-defined]
    assert (claim["status"], message["status"]) == ("sending", "succeeded")
    assert message["kind"] == "action" and message["action_id"] == "a1"


def test_two_senders_of_one_action_send_it_once(receiver, tmp_path):
    """`control approve` beside `control run` (two processes, one warehouse): the action is
    claimed in control_actions before it is sent, so exactly one of them sends it."""
    receiver.delay_s = 0.5  # the first request is still in flight when the second comes
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    Warehouse(url).close()
    rows: list[tuple[dict[str, Any], bool]] = []

    def send() -> None:
        with Warehouse(url) as warehouse:
            executor, _ = webhook(receiver.url)
            rows.append(run_action(Ledger(warehouse, MemoryPublisher()), executor, request(),
                                   int(time.time() * 1000), 0))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(receiver.requests) == 1
    assert sorted(ran for _, ran in rows) == [False, True]
