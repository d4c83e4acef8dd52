"""The control loop's step: rules on the current state -> decisions -> (by mode) actions ->
verifications, each recorded through the ledger (warehouse + control_actions topic).

`step(now_ms)` (time is passed in, so tests and replays control it):

1. evaluate every rule (udfs/control_rules.evaluate) on the ROI changelog and the pools'
   pressure, with the executed actions as the limits' history;
2. record each decision not recorded yet (decision ids hash rule, target and period, so a
   second step over the same period decides nothing new; a decision once blocked is
   decided again when its limit no longer holds): status `blocked`, else by mode
   `dry_run`, `awaiting_approval` (`approve(decision_id)` executes it later) or, in auto,
   executed at once -> `executed` or `failed`;
3. verify each succeeded action whose verify_after has passed: udfs.control.rules.verify of
   the target's metric since the action (observed_after) against the decision's baseline ->
   success or failure; with no data yet it waits one more settle time (at least an hour),
   then records no_data.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipelines.control.config import ControlConfig
from pipelines.control.executors import Executor, run_action
from pipelines.control.ledger import Ledger, iso, ms_of
from pipelines.control.metrics import ControlMetrics
from pipelines.control.state import ControlState
from schemas.rows import CONTROL_DECISION, CONTROL_VERIFICATION
from udfs.control import Decision, Rule, check_limits, evaluate, observed_after, verify

MIN_NO_DATA_GRACE_S = 3600.0
STATUS_BY_MODE = {"dry_run": "dry_run", "approval": "awaiting_approval", "auto": "approved"}


class ControlError(ValueError):
    """A request the loop cannot carry out (unknown decision, wrong status, ...)."""


def action_id_of(decision_id: str, attempt: int = 0) -> str:
    """One action per decision, with a stable id (the webhook's Idempotency-Key); a retry
    on purpose (`retry`) is the decision's next attempt, a new action with an id of its
    own."""
    tail = f"\x1f{attempt}" if attempt else ""
    return hashlib.sha256(f"action\x1f{decision_id}{tail}".encode()).hexdigest()[:20]


@dataclass
class StepReport:
    decisions: dict[str, int] = field(default_factory=dict)  # by status
    actions: dict[str, int] = field(default_factory=dict)  # by status
    verifications: dict[str, int] = field(default_factory=dict)  # by status
    pools: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        def shown(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
        pools = ", ".join(f"{p} {v:.2f}" for p, v in sorted(self.pools.items())) or "none"
        return (f"decisions: {shown(self.decisions)}; actions: {shown(self.actions)}; "
                f"verifications: {shown(self.verifications)}; pool pressure: {pools}")


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


class ControlService:
    def __init__(self, config: ControlConfig, state: ControlState, ledger: Ledger,
                 executor: Executor, metrics: ControlMetrics | None = None) -> None:
        self.config, self.state, self.ledger = config, state, ledger
        self.executor, self.metrics = executor, metrics
        self.rules = {rule.name: rule for rule in config.rules}

    def step(self, now_ms: int) -> StepReport:
        report = StepReport()
        daily = self.state.daily()
        readings = self.state.pools(now_ms)
        pools = {pool: r.pressure for pool, r in readings.items()}
        report.pools = pools
        if self.metrics is not None:
            self.metrics.set_pools(readings)
        decisions = evaluate(self.config.rules, daily, pools, self.ledger.history(), now_ms)
        for decision in decisions:
            known = self.ledger.decision(decision.decision_id)
            if known is not None and known["status"] == "approved":
                self._execute(known, now_ms, report)  # approved, then interrupted
                continue
            if known is not None and (known["status"] != "blocked" or decision.blocked):
                continue  # decided before: re-evaluation changes nothing
            rule = self.rules[decision.rule]
            row = self._decision_row(decision, _baseline(rule, decision, daily, pools), now_ms)
            self._record_decision(row, report)
            if row["status"] == "approved":
                self._execute(row, now_ms, report)
        self._verify_due(now_ms, daily, pools, report)
        return report

    def approve(self, decision_id: str, now_ms: int) -> dict[str, Any]:
        """Execute a decision awaiting approval; returns its action row."""
        row = self.ledger.decision(decision_id)
        if row is None:
            raise ControlError(f"no decision {decision_id} in the warehouse")
        if row["status"] not in ("awaiting_approval", "approved"):
            raise ControlError(f"decision {decision_id} is {row['status']}, not awaiting "
                               "approval")
        if row["rule"] not in self.rules:
            raise ControlError(f"decision {decision_id}: its rule {row['rule']!r} is not in "
                               "the config any more")
        report = StepReport()
        # the limits hold at execution, not only when it was decided: other actions may
        # have run since (a cool-down, a day's quota, the weekly cap re-clips the percent)
        rule = self.rules[row["rule"]]
        parameters = json.loads(row["parameters"])
        blocked_by, percent = check_limits(rule, row["target"], self.ledger.history(), now_ms,
                                           parameters.get("requested_percent"))
        if blocked_by is not None:
            self._record_decision({**row, "status": "blocked", "blocked_by": blocked_by},
                                  report)
            raise ControlError(f"decision {decision_id} is blocked by {blocked_by} now; "
                               "it was not executed")
        if percent is not None:
            parameters["percent"] = percent
        row = {**row, "status": "approved",
               "parameters": json.dumps(parameters, sort_keys=True)}
        self._record_decision(row, report)
        return self._execute(row, now_ms, report)

    def retry(self, decision_id: str, now_ms: int) -> dict[str, Any]:
        """Execute on purpose a decision whose action failed, whose action was claimed but
        never answered (the sender stopped mid-request: check the receiver first), or that
        was made in dry_run: as a new action (the decision's next attempt, a new
        idempotency key), the limits checked as now. Returns the new action's row."""
        row = self.ledger.decision(decision_id)
        if row is None:
            raise ControlError(f"no decision {decision_id} in the warehouse")
        actions = self.ledger.actions_of(decision_id)
        stuck = [a for a in actions if a["status"] == "sending"]
        if row["status"] not in ("failed", "dry_run") and not stuck:
            raise ControlError(
                f"decision {decision_id} is {row['status']}: only a failed or dry-run "
                "decision, or one whose action never got an answer, can be retried"
                + (" (approve it instead)" if row["status"] == "awaiting_approval" else ""))
        if any(a["status"] == "succeeded" for a in actions):
            raise ControlError(f"decision {decision_id} has an action that succeeded; "
                               "it is not sent again")
        if row["rule"] not in self.rules:
            raise ControlError(f"decision {decision_id}: its rule {row['rule']!r} is not in "
                               "the config any more")
        rule = self.rules[row["rule"]]
        parameters = json.loads(row["parameters"])
        blocked_by, percent = check_limits(rule, row["target"], self.ledger.history(), now_ms,
                                           parameters.get("requested_percent"))
        if blocked_by is not None:
            raise ControlError(f"decision {decision_id} is blocked by {blocked_by} now; "
                               "it was not executed")
        if percent is not None:
            parameters["percent"] = percent
        row = {**row, "status": "approved", "parameters": json.dumps(parameters,
                                                                     sort_keys=True)}
        report = StepReport()
        self._record_decision(row, report)
        return self._execute(row, now_ms, report, attempt=len(actions))

    # -- the steps ------------------------------------------------------------------------
    def _decision_row(self, decision: Decision, baseline: float, now_ms: int
                      ) -> dict[str, Any]:
        status = "blocked" if decision.blocked else STATUS_BY_MODE[self.config.mode]
        return {"decision_id": decision.decision_id, "rule": decision.rule,
                "target": decision.target, "action": decision.action,
                "parameters": json.dumps(decision.parameters, sort_keys=True),
                "reason": decision.reason, "status": status,
                "blocked_by": decision.blocked_by or "", "mode": self.config.mode,
                "baseline": None if math.isnan(baseline) else baseline,
                "decided_at": iso(now_ms)}

    def _record_decision(self, row: dict[str, Any], report: StepReport) -> None:
        self.ledger.record(CONTROL_DECISION, row)
        _count(report.decisions, row["status"])
        if self.metrics is not None:
            self.metrics.decisions.labels(row["rule"], row["status"]).inc()

    def _execute(self, decision: dict[str, Any], now_ms: int, report: StepReport,
                 attempt: int = 0) -> dict[str, Any]:
        request = {"action_id": action_id_of(decision["decision_id"], attempt),
                   "decision_id": decision["decision_id"], "rule": decision["rule"],
                   "target": decision["target"], "action": decision["action"],
                   "parameters": json.loads(decision["parameters"]),
                   "reason": decision["reason"]}
        rule = self.rules[decision["rule"]]
        action, ran = run_action(self.ledger, self.executor, request, now_ms, rule.settle_s)
        if ran:
            _count(report.actions, action["status"])
            if self.metrics is not None:
                self.metrics.actions.labels(action["executor"], action["status"]).inc()
        final = {"succeeded": "executed", "failed": "failed"}.get(action["status"])
        if final is not None and decision["status"] != final:  # not while another sends
            self._record_decision({**decision, "status": final}, report)
        return action

    def _verify_due(self, now_ms: int, daily: pd.DataFrame, pools: dict[str, float],
                    report: StepReport) -> None:
        for action in self.ledger.unverified():
            rule = self.rules.get(action["rule"])
            if rule is None or now_ms < ms_of(action["verify_after"]):
                continue
            executed_ms = ms_of(action["executed_at"])
            baseline = math.nan if action["baseline"] is None else float(action["baseline"])
            observed = observed_after(rule, action["target"], daily, pools, executed_ms)
            result = verify(rule, executed_ms, baseline, observed, now_ms)
            grace_ms = max(rule.settle_s, MIN_NO_DATA_GRACE_S) * 1000
            if result.status == "pending" or (
                    result.status == "no_data"
                    and now_ms < ms_of(action["verify_after"]) + grace_ms):
                continue
            self.ledger.record(CONTROL_VERIFICATION, {
                "action_id": action["action_id"], "status": result.status,
                "baseline": _number(result.baseline), "observed": _number(result.observed),
                "change_percent": _number(result.change_percent), "reason": result.reason,
                "verified_at": iso(now_ms)})
            _count(report.verifications, result.status)
            if self.metrics is not None:
                self.metrics.verifications.labels(result.status).inc()


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _baseline(rule: Rule, decision: Decision, daily: pd.DataFrame,
              pools: dict[str, float]) -> float:
    """The verified metric of the target when decided: the pool's pressure now, or over the
    for_days data days up to the decision's period (ROI of their sums, else a mean)."""
    metric = rule.verify.metric if rule.verify else rule.when.metric
    if rule.when.dimension == "pool":
        return float(pools.get(decision.target, math.nan))
    rows = daily[(daily.dimension == rule.when.dimension) & (daily.key == decision.target)]
    if rule.when.model is not None:
        rows = rows[rows.model == rule.when.model]
    days = pd.to_datetime(rows.day)
    end = pd.Timestamp(decision.period)
    rows = rows[(days <= end) & (days > end - pd.Timedelta(days=rule.when.for_days))]
    if metric == "roi":
        cost = float(rows.ad_spend.sum() + rows.compute_cost.sum())
        return float(rows.revenue.sum()) / cost if cost > 0 else math.nan
    return float(rows[metric].mean()) if len(rows) else math.nan
