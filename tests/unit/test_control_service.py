"""The control loop's step on in-memory inputs and a SQLite warehouse: decisions in each
mode, the approval flow, verification success and failure, limits across steps, and
idempotent re-evaluation (the inputs and the harness: tests/control_inputs.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pipelines.control.config import parse_control_config
from pipelines.control.service import ControlError, ControlService
from pipelines.control.state import ControlState
from pipelines.store.warehouse import Warehouse
from tests.control_inputs import (
    COOL,
    HOT,
    LAST_DAY,
    NOW,
    Loop,
    Recorder,
    gpu_payload,
    ms,
    next_day,
    roi_history,
    roi_message,
)


@pytest.fixture
def warehouse(tmp_path) -> Iterator[Warehouse]:
    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as store:
        yield store


def test_pool_pressure_from_samples_and_the_queue_gauge(warehouse):
    loop = Loop(warehouse, "dry_run")
    loop.hot(NOW, depth=6.0)
    pools = loop.state.pools(NOW)
    hot = pools[HOT]
    assert hot.gpus == 2 and hot.pressure == pytest.approx(
        hot.utilization + hot.memory + hot.queue)
    assert hot.utilization == pytest.approx(0.4) and hot.queue == pytest.approx(0.25 * 6 / 8)
    assert pools[COOL].pressure < 0.3
    assert loop.state.pools(NOW + 121_000) == {}  # older than gpu.window_s: gone


def test_dry_run_records_decisions_only(warehouse):
    loop = Loop(warehouse, "dry_run")
    loop.feed(roi_history())
    loop.hot(NOW)
    report = loop.service.step(NOW)
    decided = loop.decisions()
    assert set(decided) == {"cut_budget_low_roi/spring_sale", f"scale_out_hot_pool/{HOT}"}
    assert {row["status"] for row in decided.values()} == {"dry_run"}
    assert report.decisions == {"dry_run": 2} and loop.executor.requests == []
    cut = decided["cut_budget_low_roi/spring_sale"]
    assert json.loads(cut["parameters"])["percent"] == -20.0
    assert cut["baseline"] == pytest.approx(0.6)
    assert [m["kind"] for m in loop.publisher.messages] == ["decision", "decision"]


def test_auto_executes_once_and_re_evaluation_changes_nothing(warehouse):
    loop = Loop(warehouse, "auto")
    loop.feed(roi_history())
    loop.hot(NOW)
    loop.service.step(NOW)
    assert sorted(r["action"] for r in loop.executor.requests) == ["budget_change", "scale"]
    assert {row["status"] for row in loop.decisions().values()} == {"executed"}
    published = len(loop.publisher.messages)
    report = loop.service.step(NOW)  # the same period again
    report_later = loop.service.step(NOW + 60_000)  # same day, same cool-down window
    assert len(loop.executor.requests) == 2 and len(loop.publisher.messages) == published
    assert report.decisions == report_later.decisions == {}
    kinds = [m["kind"] for m in loop.publisher.messages]
    # each action claimed, then answered; each decision approved, then executed
    assert kinds.count("action") == 4 and kinds.count("decision") == 4


def test_approval_flow(warehouse):
    loop = Loop(warehouse, "approval")
    loop.feed(roi_history())
    loop.service.step(NOW)
    (row,) = loop.decisions().values()
    assert row["status"] == "awaiting_approval" and loop.executor.requests == []
    action = loop.service.approve(row["decision_id"], NOW + 1000)
    assert action["status"] == "succeeded" and len(loop.executor.requests) == 1
    assert loop.executor.requests[0]["parameters"]["percent"] == -20.0
    assert loop.ledger.decision(row["decision_id"])["status"] == "executed"
    with pytest.raises(ControlError, match="is executed, not awaiting approval"):
        loop.service.approve(row["decision_id"], NOW + 2000)
    with pytest.raises(ControlError, match="no decision"):
        loop.service.approve("nope", NOW)
    loop.service.step(NOW + 5000)
    assert len(loop.executor.requests) == 1


def test_a_failed_execution_marks_the_decision_failed(warehouse):
    loop = Loop(warehouse, "auto")
    loop.executor.ok = False
    loop.feed(roi_history())
    loop.service.step(NOW)
    (row,) = loop.decisions().values()
    assert row["status"] == "failed"
    assert loop.ledger.history() == [] and loop.ledger.unverified() == []


def test_verification_success_after_recovery(warehouse):
    loop = Loop(warehouse, "auto")
    loop.feed(roi_history())
    loop.hot(NOW)
    loop.service.step(NOW)
    loop.feed(metrics=[gpu_payload(NOW + 310_000, hot_util=50.0, hot_free_mib=40_000.0)])
    report = loop.service.step(NOW + 310_000)  # past the pool's settle time (300 s)
    assert report.verifications == {"success": 1}
    assert loop.service.step(NOW + 320_000).verifications == {}  # recorded once
    later = ms(next_day(LAST_DAY, 3))
    loop.feed([roi_message(next_day(LAST_DAY, d), "spring_sale", 2.4) for d in (1, 2)])
    report = loop.service.step(later)  # past 2 days
    assert report.verifications == {"success": 1}
    rows = {r["action_id"]: r for r in loop.ledger.recent()["verifications"]}
    budget = [r for r in rows.values() if r["baseline"] == pytest.approx(0.6)][0]
    assert budget["observed"] == pytest.approx(2.4) and budget["change_percent"] > 10


def test_verification_failure_when_nothing_moved(warehouse):
    loop = Loop(warehouse, "auto")
    loop.feed(roi_history())
    loop.hot(NOW)
    loop.service.step(NOW)
    loop.hot(NOW + 310_000)  # still hot after the settle time
    report = loop.service.step(NOW + 310_000)
    assert report.verifications == {"failure": 1}
    (row,) = loop.ledger.recent()["verifications"]
    assert row["status"] == "failure" and "not below 0.8" in row["reason"]
    assert report.decisions == {"approved": 1, "executed": 1}  # cool-down over: scale again


def test_weekly_cap_and_daily_limit_hold_across_steps(warehouse):
    loop = Loop(warehouse, "auto", rules=[{
        "name": "cut", "when": {"metric": "roi", "dimension": "campaign",
                                "model": "last_click", "comparison": "<", "threshold": 1.0,
                                "for_days": 3},
        "then": {"action": "budget_change", "percent": -20},
        "limits": {"max_per_day": 1, "max_change_per_week_percent": 50}}])
    loop.feed(roi_history())
    percents, statuses = [], []
    for d in range(1, 6):
        day = next_day(LAST_DAY, d - 1)
        if d > 1:
            loop.feed([roi_message(day, "spring_sale", 0.6)])
        loop.service.step(ms(next_day(day), hour=6))
        # a second step the same day after more data: max_per_day holds
        loop.feed([roi_message(next_day(day), "spring_sale", 0.6)])
        loop.service.step(ms(next_day(day), hour=18))
        loop.state.roi.pop(("last_click", next_day(day), "campaign", "spring_sale"))
    for row in sorted(loop.ledger.recent(100)["decisions"], key=lambda r: r["decided_at"]):
        statuses.append((row["status"], row["blocked_by"]))
        if row["status"] == "executed":
            percents.append(json.loads(row["parameters"])["percent"])
    assert percents[:3] == [-20.0, -20.0, -20.0]
    assert percents[3] == pytest.approx((0.5 / 0.8 ** 3 - 1) * 100)  # clipped: -2.34 %
    assert len(percents) == 4 and ("blocked", "max_change_per_week_percent") in statuses
    assert ("blocked", "max_per_day") in statuses
    assert len(loop.executor.requests) == 4


def test_an_anomalous_channel_drop_notifies(warehouse):
    loop = Loop(warehouse, "auto")
    loop.feed([roi_message(next_day(LAST_DAY, -back), "search",
                           0.4 if back == 0 else 2.5 + 0.1 * ((back * 7) % 5 - 2), "channel")
               for back in range(30)])
    loop.service.step(NOW)
    (row,) = loop.decisions().values()
    assert (row["rule"], row["target"], row["status"]) == ("notify_roi_anomaly", "search",
                                                           "executed")
    assert "anomalous" in row["reason"]
    assert loop.executor.requests[0]["parameters"] == {
        "message": "ROI of the channel dropped anomalously"}


def test_approval_checks_the_limits_again_at_execution(warehouse):
    """Two scale-outs decided in successive cool-down windows, both awaiting approval:
    approving the second right after the first is held back by the cool-down."""
    loop = Loop(warehouse, "approval")
    loop.hot(NOW)
    loop.service.step(NOW)
    loop.hot(NOW + 301_000)
    loop.service.step(NOW + 301_000)
    waiting = sorted((row["decided_at"], row["decision_id"])
                     for row in loop.ledger.recent(100)["decisions"]
                     if row["status"] == "awaiting_approval")
    assert len(waiting) == 2
    loop.service.approve(waiting[0][1], NOW + 302_000)
    with pytest.raises(ControlError, match="blocked by cooldown_s"):
        loop.service.approve(waiting[1][1], NOW + 303_000)
    assert len(loop.executor.requests) == 1
    assert loop.ledger.decision(waiting[1][1])["status"] == "blocked"


def test_retry_executes_a_failed_or_dry_run_decision_on_purpose_as_a_new_action(warehouse):
    loop = Loop(warehouse, "auto")
    loop.executor.ok = False
    loop.feed(roi_history())
    loop.service.step(NOW)
    (row,) = loop.decisions().values()
    decision = row["decision_id"]
    assert row["status"] == "failed"
    loop.service.step(NOW + 1000)  # the loop never sends a failed action again by itself
    assert len(loop.executor.requests) == 1
    loop.executor.ok = True
    action = loop.service.retry(decision, NOW + 2000)
    first, second = loop.executor.requests
    assert action["status"] == "succeeded" and second["action_id"] != first["action_id"]
    assert [a["status"] for a in loop.ledger.actions_of(decision)] == ["failed", "succeeded"]
    assert loop.ledger.decision(decision)["status"] == "executed"
    with pytest.raises(ControlError, match="is executed: only a failed or dry-run decision"):
        loop.service.retry(decision, NOW + 3000)
    # a decision made in dry_run
    dry = Loop(warehouse, "dry_run")
    dry.feed(roi_history(dropped="autumn_sale"))
    dry.service.step(NOW)
    (made,) = [r for r in dry.decisions().values() if r["target"] == "autumn_sale"]
    assert made["status"] == "dry_run" and dry.executor.requests == []
    assert dry.service.retry(made["decision_id"], NOW + 1000)["status"] == "succeeded"
    assert len(dry.executor.requests) == 1


def test_an_action_claimed_but_never_answered_is_not_sent_again_until_retried(warehouse):
    """The sender stopped mid-request (its claim, status sending, is all that is recorded):
    neither a later step nor approve sends it again; retry does, as a new action."""
    loop = Loop(warehouse, "approval")
    loop.feed(roi_history())
    loop.service.step(NOW)
    (row,) = loop.decisions().values()
    decision = row["decision_id"]

    class Crash(Exception):
        pass

    def crash(request: dict[str, Any]) -> Any:
        raise Crash
    loop.executor.execute = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        loop.service.approve(decision, NOW + 1000)
    (claimed,) = loop.ledger.actions_of(decision)
    assert claimed["status"] == "sending"
    loop.executor = Recorder()
    loop.service = ControlService(loop.config, loop.state, loop.ledger, loop.executor)
    loop.service.step(NOW + 2000)  # approved, then interrupted: the claim holds
    assert loop.service.approve(decision, NOW + 3000)["status"] == "sending"
    assert loop.executor.requests == []
    action = loop.service.retry(decision, NOW + 4000)
    assert action["status"] == "succeeded" and len(loop.executor.requests) == 1


def test_a_withdrawn_roi_row_takes_its_key_out_of_the_loops_view():
    """The ROI job withdraws a key a corrected conversion left without credit: the loop
    forgets it instead of acting on its last, stale figures."""
    state = ControlState(parse_control_config({}))
    state.add_roi(roi_message(LAST_DAY, "spring_sale", 0.6))
    withdrawn = {**json.loads(roi_message(LAST_DAY, "spring_sale", 0.6)), "conversions": 0.0,
                 "revenue": 0.0, "ad_spend": 0.0, "compute_cost": 0.0, "roi": None,
                 "roas": None, "margin_roi": None, "withdrawn": True}
    state.add_roi(json.dumps(withdrawn).encode())
    assert state.roi == {}
