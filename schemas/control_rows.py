"""The control loop's rows (schemas/rows.py lists them in ROWS): what its rules decided, the
actions executed, and whether they moved their target (control_actions topic; tables in
schemas/sql/warehouse.sql). Definitions: docs/control.md.
"""

from __future__ import annotations

from schemas.row_layout import Column, Row

CONTROL_DECISION = Row(
    "control_decision",
    "What a rule of the control loop decided (control_actions topic, kind=decision): an "
    "action on a target, or why it was held back. Idempotent by decision_id.",
    (Column("decision_id", "string", "stable for the rule, target and period"),
     Column("rule", "string"),
     Column("target", "string", "the campaign, channel or GPU pool"),
     Column("action", "string", "budget_change | scale | notify"),
     Column("parameters", "string", "JSON: percent, nodes, message, ..."),
     Column("reason", "string"),
     Column("status", "string", "dry_run | awaiting_approval | approved | blocked | "
                                "executed | failed"),
     Column("blocked_by", "string", "the limit that held it back; '' when none"),
     Column("mode", "string", "dry_run | approval | auto"),
     Column("baseline", "double", "the metric when decided (verification compares with it)",
            nullable=True),
     Column("decided_at", "string", "ISO 8601 UTC")),
    key=("decision_id",), table="control_decisions")

CONTROL_ACTION = Row(
    "control_action",
    "An executed decision (control_actions topic, kind=action): which executor ran it, "
    "how many attempts it took and what the other side answered. The action id is the "
    "idempotency key sent with it.",
    (Column("action_id", "string"),
     Column("decision_id", "string"),
     Column("executor", "string", "webhook | warehouse"),
     Column("status", "string", "succeeded | failed | sending (claimed, no answer yet)"),
     Column("attempts", "bigint"),
     Column("response", "string", "status line or error, shortened"),
     Column("executed_at", "string", "ISO 8601 UTC"),
     Column("verify_after", "string", "ISO 8601 UTC: executed_at + the rule's settle time")),
    key=("action_id",), table="control_actions")

CONTROL_VERIFICATION = Row(
    "control_verification",
    "Whether an executed action moved its target, checked after the settle time through "
    "the same metrics (control_actions topic, kind=verification).",
    (Column("action_id", "string"),
     Column("status", "string", "success | failure | no_data"),
     Column("baseline", "double", nullable=True),
     Column("observed", "double", nullable=True),
     Column("change_percent", "double", nullable=True),
     Column("reason", "string"),
     Column("verified_at", "string", "ISO 8601 UTC")),
    key=("action_id",), table="control_verifications")
