"""The control loop's record: decisions, actions and verifications (schemas/rows.py
CONTROL_*) upserted into the warehouse by key AND published to the `control_actions` topic
as JSON with a `kind` field (decision | action | verification), so every step is auditable
and feeds back into the stream. The warehouse is also the loop's memory: which decisions
exist, which actions ran (the limits' history, the idempotency check), what awaits
verification (its reads: pipelines/store/control.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from pipelines.store import control
from pipelines.store.warehouse import Warehouse
from schemas.rows import CONTROL_ACTION, CONTROL_DECISION, CONTROL_VERIFICATION, Row
from udfs.control import ActionRecord

KINDS = {CONTROL_DECISION.name: "decision", CONTROL_ACTION.name: "action",
         CONTROL_VERIFICATION.name: "verification"}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def ms_of(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


class Publisher(Protocol):
    def publish(self, kind: str, key: str, row: dict[str, Any]) -> None: ...


class MemoryPublisher:
    """Keeps the messages (tests, and runs without Kafka)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def publish(self, kind: str, key: str, row: dict[str, Any]) -> None:
        self.messages.append({"kind": kind, **row})


class KafkaPublisher:
    """One JSON message per row on the actions topic, keyed by the row's id (a decision's
    later states stay in order on one partition)."""

    def __init__(self, bootstrap: str, topic: str, client: dict[str, Any] | None = None,
                 timeout_s: float = 10.0) -> None:
        from pipelines.kafka.io import producer

        self.topic, self.timeout_s = topic, timeout_s
        self.producer = producer(bootstrap, max_block_ms=int(timeout_s * 1000),
                                 **(client or {}))

    def publish(self, kind: str, key: str, row: dict[str, Any]) -> None:
        value = json.dumps({"kind": kind, **row}, sort_keys=True).encode()
        self.producer.send(self.topic, key=key.encode(), value=value).get(self.timeout_s)

    def close(self) -> None:
        self.producer.close(timeout=self.timeout_s)


class Ledger:
    def __init__(self, warehouse: Warehouse, publisher: Publisher) -> None:
        self.warehouse, self.publisher = warehouse, publisher

    def record(self, row: Row, values: dict[str, Any]) -> None:
        """Upsert one CONTROL_* row, then publish it."""
        self.warehouse.store(row, [tuple(values[name] for name in row.names)])
        self.publisher.publish(KINDS[row.name], str(values[row.key[0]]), values)

    def claim(self, row: Row, values: dict[str, Any]) -> bool:
        """Insert one CONTROL_* row only if its key is not there yet (one statement: of two
        processes claiming the same key, one wins); publish it if it was. False: taken."""
        inserted = self.warehouse.claim(row, tuple(values[name] for name in row.names))
        if inserted:
            self.publisher.publish(KINDS[row.name], str(values[row.key[0]]), values)
        return inserted

    def decision(self, decision_id: str) -> dict[str, Any] | None:
        return control.decision(self.warehouse, decision_id)

    def action(self, action_id: str) -> dict[str, Any] | None:
        return control.action(self.warehouse, action_id)

    def actions_of(self, decision_id: str) -> list[dict[str, Any]]:
        """Every action of one decision (a retry adds one), oldest first."""
        return control.actions_of(self.warehouse, decision_id)

    def history(self) -> list[ActionRecord]:
        """Every action that ran (succeeded), as the rules' limits count them."""
        records = []
        for found in control.succeeded_actions(self.warehouse):
            rule, target, action, executed_at, parameters = found
            applied = json.loads(parameters)
            change = applied.get("percent") if action == "budget_change" else \
                applied.get("nodes") if action == "scale" else 0.0
            records.append(ActionRecord(rule, target, action, ms_of(executed_at),
                                        float(change or 0.0)))
        return records

    def unverified(self) -> list[dict[str, Any]]:
        """Succeeded actions without a verification yet, with their decision's columns."""
        return control.unverified(self.warehouse)

    def recent(self, limit: int = 20) -> dict[str, list[dict[str, Any]]]:
        """The newest decisions, actions and verifications (for `seedance control status`)."""
        return control.recent(self.warehouse, limit)
