"""What the control loop reads of its record in the warehouse (control_decisions,
control_actions, control_verifications, schemas/rows.py CONTROL_*; written by
pipelines/control/ledger.py): its decisions and actions by id, the actions that ran (the
rules' limits), those awaiting verification, the newest of each, and each verification with
its rule and target."""

from __future__ import annotations

from typing import Any

from pipelines.store.warehouse import Warehouse
from schemas.rows import CONTROL_ACTION, CONTROL_DECISION, CONTROL_VERIFICATION, Row

Found = dict[str, Any]


def _rows(warehouse: Warehouse, row: Row, where: str = "", params: tuple[object, ...] = (),
          order: str = "") -> list[Found]:
    sql = f"SELECT {', '.join(row.names)} FROM {row.table} {where} {order}"
    return [dict(zip(row.names, found, strict=True))
            for found in warehouse.query(sql, params)]


def decision(warehouse: Warehouse, decision_id: str) -> Found | None:
    found = _rows(warehouse, CONTROL_DECISION, "WHERE decision_id = ?", (decision_id,))
    return found[0] if found else None


def action(warehouse: Warehouse, action_id: str) -> Found | None:
    found = _rows(warehouse, CONTROL_ACTION, "WHERE action_id = ?", (action_id,))
    return found[0] if found else None


def actions_of(warehouse: Warehouse, decision_id: str) -> list[Found]:
    """Every action of one decision (a retry adds one), oldest first."""
    return _rows(warehouse, CONTROL_ACTION, "WHERE decision_id = ?", (decision_id,),
                 "ORDER BY executed_at, action_id")


def succeeded_actions(warehouse: Warehouse) -> list[tuple[Any, ...]]:
    """(rule, target, action, executed_at, parameters) of every action that succeeded."""
    return warehouse.query(
        "SELECT d.rule, d.target, d.action, a.executed_at, d.parameters "
        "FROM control_actions a JOIN control_decisions d "
        "ON a.decision_id = d.decision_id WHERE a.status = 'succeeded'")


def unverified(warehouse: Warehouse) -> list[Found]:
    """Succeeded actions without a verification yet, with their decision's columns."""
    names = ("action_id", "decision_id", "executed_at", "verify_after", "rule", "target",
             "baseline")
    found = warehouse.query(
        "SELECT a.action_id, a.decision_id, a.executed_at, a.verify_after, d.rule, "
        "d.target, d.baseline FROM control_actions a "
        "JOIN control_decisions d ON a.decision_id = d.decision_id "
        "LEFT JOIN control_verifications v ON v.action_id = a.action_id "
        "WHERE a.status = 'succeeded' AND v.action_id IS NULL ORDER BY a.executed_at")
    return [dict(zip(names, row, strict=True)) for row in found]


def recent(warehouse: Warehouse, limit: int = 20) -> dict[str, list[Found]]:
    """The newest decisions, actions and verifications."""
    return {
        "decisions": _rows(warehouse, CONTROL_DECISION, order=f"ORDER BY decided_at DESC, "
                                                              f"decision_id LIMIT {int(limit)}"),
        "actions": _rows(warehouse, CONTROL_ACTION, order=f"ORDER BY executed_at DESC, "
                                                          f"action_id LIMIT {int(limit)}"),
        "verifications": _rows(warehouse, CONTROL_VERIFICATION,
                               order=f"ORDER BY verified_at DESC, action_id "
                                     f"LIMIT {int(limit)}")}


def verification_outcomes(warehouse: Warehouse) -> list[tuple[Any, ...]]:
    """(rule, target, status, baseline, observed) of every verification, by rule."""
    return warehouse.query(
        "SELECT d.rule, d.target, v.status, v.baseline, v.observed FROM "
        "control_verifications v JOIN control_actions a USING (action_id) "
        "JOIN control_decisions d USING (decision_id) ORDER BY d.rule")
