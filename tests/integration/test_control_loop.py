"""The control loop end to end on a real broker and warehouse: ROI rows with a drop on one
campaign and OTLP GPU metrics with a pressure spike on one pool go to Kafka; the service,
in auto mode, reads them (read_committed), cuts the budget and scales the pool out through
a real local webhook, once, recorded in the warehouse and on the control_actions topic;
then recovery data and a later clock verify the budget cut as a success and the scale-out
(pressure still high) as a failure."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from pipelines.control.config import parse_control_config
from pipelines.control.executors import WebhookExecutor
from pipelines.control.inputs import KafkaInputs
from pipelines.control.ledger import KafkaPublisher, Ledger
from pipelines.control.service import ControlService
from pipelines.control.signing import verify_request
from pipelines.control.state import ControlState
from pipelines.kafka.io import producer, read_all
from pipelines.settings.sections import Secret
from pipelines.store.loading import reject
from pipelines.store.warehouse import Warehouse
from tests.control_inputs import (
    HOT,
    LAST_DAY,
    NOW,
    Receiver,
    gpu_payload,
    ms,
    next_day,
    queue_payload,
    roi_history,
    roi_message,
)

pytestmark = pytest.mark.integration


def publish(bootstrap: str, topic: str, values: list[bytes]) -> None:
    sender = producer(bootstrap)
    try:
        for value in values:
            sender.send(topic, value=value)
        sender.flush()
    finally:
        sender.close()


def test_control_loop_decides_executes_and_verifies(kafka: str, topic: Callable[..., str],
                                                    warehouse_url: str) -> None:
    roi, alerts, metrics, actions = (topic(n) for n in ("roi", "alerts", "metrics", "actions"))
    publish(kafka, roi, roi_history())
    publish(kafka, metrics, [gpu_payload(NOW), queue_payload(HOT, 6, NOW)])
    receiver = Receiver()
    config = parse_control_config({
        "mode": "auto", "inputs": {"roi_topic": roi, "alerts_topic": alerts,
                                   "metrics_topic": metrics},
        "outputs": {"actions_topic": actions},
        "executors": {"webhook": {"url": receiver.url, "secret": "k3y", "retries": 2,
                                  "backoff_s": 0.05}}})
    state = ControlState(config)
    inputs = KafkaInputs(kafka, config, state)
    publisher = KafkaPublisher(kafka, actions)
    executor = WebhookExecutor(config.executors.webhook)
    try:
        with Warehouse(warehouse_url) as warehouse:
            service = ControlService(config, state, Ledger(warehouse, publisher), executor)
            assert inputs.poll() == 2 * 33 + 2
            service.step(NOW)
            service.step(NOW + 1000)  # re-evaluation: nothing new
            sent = [json.loads(r["raw"]) for r in receiver.requests]
            assert sorted((s["action"], s["target"]) for s in sent) == [
                ("budget_change", "spring_sale"), ("scale", HOT)]
            for request in receiver.requests:
                assert verify_request(Secret("k3y"), "POST", request["path"],
                                      request["headers"], request["raw"]).act
                assert request["headers"]["Idempotency-Key"] == json.loads(
                    request["raw"])["action_id"]
            stored = warehouse.query("SELECT a.status, d.action, d.status FROM control_actions a"
                                     " JOIN control_decisions d USING (decision_id)")
            assert sorted(stored) == [("succeeded", "budget_change", "executed"),
                                      ("succeeded", "scale", "executed")]
            on_topic = [json.loads(value) for _, value in read_all(kafka, actions)]
            # each action claimed (sending), then its outcome; each decision twice
            assert sorted(m["kind"] for m in on_topic) == ["action"] * 4 + ["decision"] * 4
            assert sorted(m["status"] for m in on_topic if m["kind"] == "action") == [
                "sending", "sending", "succeeded", "succeeded"]
            ids = {s["action"]: s["action_id"] for s in sent}

            # the pool is still hot after its settle time: the scale-out failed to help
            later = NOW + 310_000
            publish(kafka, metrics, [gpu_payload(later), queue_payload(HOT, 6, later)])
            inputs.poll()
            service.step(later)
            # the campaign recovered two days on: the budget cut worked
            publish(kafka, roi, [roi_message(next_day(LAST_DAY, d), "spring_sale", 2.4)
                                 for d in (1, 2)])
            inputs.poll()
            service.step(ms(next_day(LAST_DAY, 3)))
            checked = dict(warehouse.query(
                "SELECT action_id, status FROM control_verifications"))
            assert checked[ids["budget_change"]] == "success"
            assert checked[ids["scale"]] == "failure"
            on_topic = [json.loads(value) for _, value in read_all(kafka, actions)]
            verified = {m["action_id"]: m["status"] for m in on_topic
                        if m["kind"] == "verification"}
            assert verified[ids["budget_change"]] == "success"
            assert verified[ids["scale"]] == "failure"
            budget_calls = [r for r in receiver.requests
                            if json.loads(r["raw"])["action"] == "budget_change"]
            assert len(budget_calls) == 1
    finally:
        inputs.close()
        publisher.close()
        executor.close()
        receiver.close()


def test_bad_roi_rows_are_skipped_with_their_place_and_never_stop_the_loop(
        kafka: str, topic: Callable[..., str], caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    """The loop rebuilds its state from the roi topic's beginning on every start: a bad row
    there (an impossible day, a ROI that is no number, a list for a key, no JSON object)
    must not stop it on every start; each is skipped, logged with topic, partition and
    offset, set aside in the warehouse's load_rejects as the loader does (once, however
    often the loop starts), and the good rows are used."""
    roi = topic("roi")
    good = roi_history()[:3]
    row = json.loads(good[0])
    bad = [json.dumps({**row, "day": "2026-13-45"}).encode(),
           json.dumps({**row, "roi": "abc"}).encode(),
           json.dumps({**row, "key": ["a", "b"]}).encode(),
           json.dumps([1, 2, 3]).encode(),
           json.dumps({**row, "revenue": None}).encode()]
    publish(kafka, roi, [good[0], *bad, *good[1:]])
    config = parse_control_config({"inputs": {"roi_topic": roi, "alerts_topic": "",
                                              "metrics_topic": ""}})
    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        for _start in range(2):  # a restart reads the topic again
            state = ControlState(config)
            inputs = KafkaInputs(kafka, config, state,
                                 reject=partial(reject, warehouse, "control"))
            caplog.clear()
            try:
                with caplog.at_level("WARNING", logger="seedance.control"):
                    assert inputs.poll() == 3
            finally:
                inputs.close()
        rejects = warehouse.query("SELECT consumer, topic, partition, message_offset, reason, "
                                  "payload_base64 FROM load_rejects ORDER BY message_offset")
    assert inputs.skipped == 5
    places = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped")]
    assert [p.split(":")[0] for p in places] == [f"skipped {roi}[0]@{n}" for n in range(1, 6)]
    assert "day" in places[0] and "roi must be a finite number" in places[1]
    assert len(state.daily()) == 3  # the good rows, usable
    assert [r[:4] for r in rejects] == [("control", roi, 0, n) for n in range(1, 6)]
    assert "roi must be a finite number" in rejects[1][4]
    assert [base64.b64decode(r[5]) for r in rejects] == bad


def test_a_sample_published_after_start_is_read_when_every_older_one_is_out_of_the_window(
        kafka: str, topic: Callable[..., str]) -> None:
    """With only samples older than gpu.window_s on the metrics topic, the loop starts at
    the topic's end as it is at start: a sample published after that is read (the end
    must not be taken at the first poll, which would skip it)."""
    metrics = topic("metrics")
    publish(kafka, metrics, [gpu_payload(NOW - 3_600_000)])
    time.sleep(2.5)  # older than the window by its Kafka timestamp (the broker's clock)
    config = parse_control_config({"inputs": {"roi_topic": topic("roi"), "alerts_topic": "",
                                              "metrics_topic": metrics},
                                   "gpu": {"window_s": 1}})
    state = ControlState(config)
    inputs = KafkaInputs(kafka, config, state)
    try:
        publish(kafka, metrics, [gpu_payload(NOW)])
        assert inputs.poll() == 1
    finally:
        inputs.close()
    assert state.pools(NOW)[HOT].utilization == pytest.approx(0.4)  # the new sample, 99 %
