"""The control loop's record (control_decisions, control_actions, control_verifications,
written by `seedance control run`): what each rule decided, what was executed and whether
it moved its target.

A decision's story runs through three tables joined by id: its actions carry its
decision_id, their verifications the action_id. Each table repeats the rule and target it
belongs to, and the decisions table sums the story up in one cell ("webhook: succeeded
after 2 attempts; verified success (+12.0 %)"), so a reader never has to join ids by eye.
The status filter picks decisions with that status at any step (decided, executed or
verified); the rule filter the decisions of one rule; the dates the days decided.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pipelines.dashboard.filters import Filters, day_range
from pipelines.dashboard.paging import EVERY_ROW, Page, Paging
from pipelines.dashboard.tables import Column, Kpi, View
from pipelines.store.warehouse import Warehouse

CONTROL_EMPTY = ("No control decisions yet: `seedance control run` evaluates the rules over "
                 "the warehouse and records every decision, action and verification here.")
FILTERS_APPLY = ("Dates choose the day decided; the status filter matches a decision, its "
                 "actions or their verifications. Platform, campaign and model do not apply.")

DECISION_COLUMNS = (
    Column("decided_at", "Decided"), Column("rule", "Rule"), Column("target", "Target"),
    Column("action", "Action"), Column("parameters", "Parameters"), Column("reason", "Reason"),
    Column("status", "Status"), Column("blocked_by", "Blocked by"), Column("mode", "Mode"),
    Column("outcome", "What became of it"), Column("decision_id", "Decision id"))
ACTION_COLUMNS = (
    Column("executed_at", "Executed"), Column("rule", "Rule"), Column("target", "Target"),
    Column("executor", "Executor"), Column("status", "Status"),
    Column("attempts", "Attempts", "count"), Column("response", "Response"),
    Column("verify_after", "Verify after"), Column("verification", "Verification"),
    Column("action_id", "Action id"), Column("decision_id", "Decision id"))
VERIFICATION_COLUMNS = (
    Column("verified_at", "Verified"), Column("rule", "Rule"), Column("target", "Target"),
    Column("action", "Action"), Column("status", "Status"),
    Column("baseline", "Baseline", "number"), Column("observed", "Observed", "number"),
    Column("change", "Change", "percent"), Column("reason", "Reason"),
    Column("action_id", "Action id"))


def _where(filters: Filters) -> tuple[str, list[object]]:
    """Conditions on the decisions `d` the filters select."""
    where, params = day_range("SUBSTR(d.decided_at, 1, 10)", filters)
    if filters.rule:
        where += " AND d.rule = ?"
        params.append(filters.rule)
    if filters.status:
        where += (" AND (d.status = ? OR EXISTS (SELECT 1 FROM control_actions sa LEFT JOIN "
                  "control_verifications sv ON sv.action_id = sa.action_id WHERE "
                  "sa.decision_id = d.decision_id AND (sa.status = ? OR sv.status = ?)))")
        params += [filters.status] * 3
    return where, params


def control_options(warehouse: Warehouse) -> dict[str, list[str]]:
    """Values for the control page's rule and status lists."""
    rules = [r[0] for r in warehouse.query(
        "SELECT DISTINCT rule FROM control_decisions ORDER BY rule")]
    statuses = {r[0] for r in warehouse.query(
        "SELECT status FROM control_decisions UNION SELECT status FROM control_actions "
        "UNION SELECT status FROM control_verifications")}
    return {"rules": rules, "statuses": sorted(statuses)}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _outcome(status: str, blocked_by: str, actions: list[tuple[Any, ...]]) -> str:
    """The rest of a decision's story in a few words, from its newest action."""
    if status == "blocked":
        return f"blocked by {blocked_by}" if blocked_by else "blocked"
    if not actions:
        return {"awaiting_approval": "awaiting approval", "dry_run": "dry run: not executed",
                "approved": "approved, not executed yet"}.get(status, status)
    (_, _, _, executor, action_status, attempts, _, verify_after, verification, _, _,
     change) = actions[0]
    text = f"{executor}: {action_status} after {_plural(attempts, 'attempt')}"
    if verification:
        text += f"; verified {verification}"
        text += f" ({change * 100:+.1f} %)" if change is not None else ""
    elif action_status == "succeeded":
        text += f"; verify after {verify_after}"
    return text


def control_view(warehouse: Warehouse, filters: Filters, paging: Paging = EVERY_ROW) -> View:
    view = View("control", "Control loop: decisions, actions and verifications")
    if not warehouse.query("SELECT 1 FROM control_decisions LIMIT 1"):
        view.notice = CONTROL_EMPTY
        return view
    where, params = _where(filters)
    decisions = paging.query(
        warehouse, "control_decisions",
        "SELECT d.decided_at, d.rule, d.target, d.action, d.parameters, d.reason, d.status, "
        f"d.blocked_by, d.mode, d.decision_id FROM control_decisions d WHERE 1 = 1{where}",
        params, "d.decided_at DESC, d.decision_id")
    actions_select = (
        "SELECT a.executed_at, d.rule, d.target, a.executor, a.status, a.attempts, a.response, "
        "a.verify_after, COALESCE(v.status, ''), a.action_id, a.decision_id, "
        "v.change_percent FROM control_actions a JOIN control_decisions d ON d.decision_id = "
        "a.decision_id LEFT JOIN control_verifications v ON v.action_id = a.action_id WHERE "
        "1 = 1")
    actions_order = "a.executed_at DESC, a.action_id"
    actions = paging.query(warehouse, "control_actions", f"{actions_select}{where}", params,
                           actions_order)
    verifications = paging.query(
        warehouse, "control_verifications",
        "SELECT v.verified_at, d.rule, d.target, d.action, v.status, v.baseline, v.observed, "
        "v.change_percent, v.reason, v.action_id, d.decision_id FROM control_verifications v "
        "JOIN control_actions a ON a.action_id = v.action_id JOIN control_decisions d ON "
        f"d.decision_id = a.decision_id WHERE 1 = 1{where}", params,
        "v.verified_at DESC, v.action_id")
    # the story of each decision shown, from its own actions (newest first), on any page
    # of the actions table: every action when it is whole, else those of these decisions
    shown = [r[9] for r in decisions.rows]
    own = actions.rows
    if paging.size is not None:
        own = warehouse.query(
            f"{actions_select} AND a.decision_id IN ({', '.join('?' * len(shown))}) "
            f"ORDER BY {actions_order}", shown) if shown else []
    by_decision: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for action in own:
        by_decision[action[10]].append(_percent(action, 11))
    # no limit, no verification yet: None, shown as a dash (exported as an empty field)
    decision_rows = [(*r[:7], r[7] or None, r[8], _outcome(r[6], r[7], by_decision[r[9]]),
                      r[9]) for r in decisions.rows]
    # the headline figures over every decision the filters select, not the page shown
    (count, awaiting, blocked), = warehouse.query(
        "SELECT COUNT(*), COUNT(CASE WHEN d.status = 'awaiting_approval' THEN 1 END), "
        "COUNT(CASE WHEN d.status = 'blocked' THEN 1 END) FROM control_decisions d WHERE "
        f"1 = 1{where}", params)
    (success, failure), = warehouse.query(
        "SELECT COUNT(CASE WHEN v.status = 'success' THEN 1 END), COUNT(CASE WHEN v.status = "
        "'failure' THEN 1 END) FROM control_verifications v JOIN control_actions a ON "
        "a.action_id = v.action_id JOIN control_decisions d ON d.decision_id = a.decision_id "
        f"WHERE 1 = 1{where}", params)
    view.kpis = [
        Kpi("kpi_decisions", "Decisions", count, "count"),
        Kpi("kpi_awaiting", "Awaiting approval", awaiting, "count"),
        Kpi("kpi_blocked", "Blocked by a limit", blocked, "count"),
        Kpi("kpi_verified", "Verified success", success, "count"),
        Kpi("kpi_failed", "Verified failure", failure, "count")]
    view.tables = [
        Page(decision_rows, decisions.total, decisions.offset).table(
            "control_decisions", "Decisions", DECISION_COLUMNS, note=FILTERS_APPLY,
            warn=("status", "failed"), empty="No decisions for these filters."),
        Page([(*r[:8], r[8] or None, *r[9:11]) for r in actions.rows], actions.total,
             actions.offset).table(
            "control_actions", "Actions executed", ACTION_COLUMNS, warn=("status", "failed"),
            empty="No executed actions for these decisions."),
        Page([_percent(r, 7)[:10] for r in verifications.rows], verifications.total,
             verifications.offset).table(
            "control_verifications", "Verifications", VERIFICATION_COLUMNS,
            warn=("status", "failure"),
            empty="No verifications for these decisions (yet: each waits for its settle "
                  "time)."),
    ]
    return view


def _percent(row: tuple[Any, ...], at: int) -> tuple[Any, ...]:
    """The row with its percent column `at` (12 for +12 %) as a fraction (0.12)."""
    return (*row[:at], None if row[at] is None else row[at] / 100, *row[at + 1:])
