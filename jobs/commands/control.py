"""`seedance control`: the control loop (docs/control.md). `run` polls the ROI, alerts and
GPU metrics topics and steps the rules (dry_run, approval or auto), `approve DECISION_ID`
executes a decision awaiting approval, `retry DECISION_ID` executes again on purpose a
failed, unanswered or dry-run decision (a new action), `status` prints the newest
decisions, actions and verifications from the warehouse."""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from jobs.commands.common import BOOTSTRAP_HELP, CliError

CONTROL_HELP = "control config YAML (default: jobs/config/control.yaml)"
JOB_CONFIG_HELP = "streaming job config YAML, for Kafka and the warehouse (default: " \
                  "jobs/config/streaming.yaml)"


def add_control(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from pipelines.control.config import MODES

    p = sub.add_parser("control", help="the control loop: rules on live ROI and GPU pressure "
                                       "-> budget cuts, scale-outs, notifications, verified")
    commands = p.add_subparsers(dest="control_command", required=True)
    run = commands.add_parser("run", help="poll the topics and apply the rules (a loop)")
    approve = commands.add_parser("approve", help="execute a decision awaiting approval")
    approve.add_argument("decision_id")
    retry = commands.add_parser(
        "retry", help="execute again, on purpose, a decision whose action failed or never got "
                      "an answer, or one made in dry_run (a new action and idempotency key)")
    retry.add_argument("decision_id")
    status = commands.add_parser("status", help="recent decisions, actions, verifications")
    status.add_argument("--limit", type=int, default=10, help="rows of each (default 10)")
    for command in (run, approve, retry, status):
        command.add_argument("--config", help=CONTROL_HELP)
        command.add_argument("--job-config", help=JOB_CONFIG_HELP)
        command.add_argument("--warehouse", help="warehouse URL (default: the job config's)")
    for command in (run, approve, retry):
        command.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    run.add_argument("--once", action="store_true", help="one poll and one step, then exit")
    run.add_argument("--mode", choices=MODES, help="overrides the config's mode")
    run.set_defaults(func=cmd_run)
    approve.set_defaults(func=cmd_approve)
    retry.set_defaults(func=cmd_retry)
    status.set_defaults(func=cmd_status)


def _configs(args: argparse.Namespace) -> tuple[Any, Any]:
    from pipelines.control.config import load_control_config
    from pipelines.settings.job_config import load_config

    job = load_config(Path(args.job_config) if args.job_config else None)
    control = load_control_config(Path(args.config) if args.config else None,
                                  getattr(args, "mode", None), job)
    return control, job


def _open(args: argparse.Namespace, stack: ExitStack, control: Any, job: Any
          ) -> tuple[Any, str, dict[str, Any]]:
    """The service with its warehouse, Kafka publisher and executor (closed by `stack`),
    the Kafka address and the client settings."""
    from kafka.errors import KafkaError

    from pipelines.control.executors import WarehouseExecutor, WebhookExecutor
    from pipelines.control.ledger import KafkaPublisher, Ledger
    from pipelines.control.service import ControlService
    from pipelines.control.state import ControlState
    from pipelines.kafka.address import resolve_bootstrap
    from pipelines.kafka.io import ensure_topics
    from pipelines.kafka.security import for_python
    from pipelines.store.warehouse import Warehouse

    bootstrap = resolve_bootstrap(args.bootstrap, job)
    client = for_python(dict(job.kafka.properties))
    inputs = control.inputs
    topics = [t for t in (inputs.roi_topic, inputs.alerts_topic, inputs.metrics_topic,
                          control.outputs.actions_topic) if t]
    try:
        ensure_topics(bootstrap, topics, client=client)
        publisher = KafkaPublisher(bootstrap, control.outputs.actions_topic, client)
    except KafkaError as error:
        raise CliError(f"Kafka at {bootstrap}: {type(error).__name__}: {error}") from None
    stack.callback(publisher.close)
    warehouse = stack.enter_context(Warehouse(args.warehouse or job.warehouse.url))
    hook = control.executors.webhook
    executor = WebhookExecutor(hook) if hook.url else WarehouseExecutor()
    if isinstance(executor, WebhookExecutor):
        stack.callback(executor.close)
    service = ControlService(control, ControlState(control), Ledger(warehouse, publisher),
                             executor)
    return service, bootstrap, client


def cmd_run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from pipelines.control.inputs import KafkaInputs
    from pipelines.control.ledger import iso
    from pipelines.control.metrics import ControlMetrics
    from pipelines.reconcile.alerts import redacted
    from pipelines.store.loading import reject
    from pipelines.store.warehouse import redacted_url

    control, job = _configs(args)
    with ExitStack() as stack:
        service, bootstrap, client = _open(args, stack, control, job)
        service.metrics = ControlMetrics()
        try:
            warehouse = service.ledger.warehouse
            inputs = KafkaInputs(bootstrap, control, service.state, client,
                                 reject=partial(reject, warehouse, "control"))
        except KafkaError as error:
            raise CliError(f"Kafka at {bootstrap}: {error}") from None
        stack.callback(inputs.close)
        hook = control.executors.webhook.url
        print(f"control loop: mode {control.mode}, {len(control.rules)} rules, executor "
              f"{redacted(hook, hook) if hook else 'warehouse'}, warehouse "
              f"{redacted_url(service.ledger.warehouse.url)}, decisions to "
              f"{control.outputs.actions_topic}")
        if control.metrics_port:
            port = service.metrics.serve(control.metrics_port, control.metrics_address)
            stack.callback(service.metrics.close)
            print(f"metrics on http://{control.metrics_address}:{port}/metrics")
        while True:
            read = inputs.poll()
            now_ms = int(time.time() * 1000)
            report = service.step(now_ms)
            print(f"{iso(now_ms)} read {read} messages; {report.line()}", flush=True)
            if args.once:
                return 0
            time.sleep(control.poll_interval_s)


def cmd_approve(args: argparse.Namespace) -> int:
    return _execute(args, "approve")


def cmd_retry(args: argparse.Namespace) -> int:
    return _execute(args, "retry")


def _execute(args: argparse.Namespace, how: str) -> int:
    from pipelines.control.service import ControlError

    control, job = _configs(args)
    with ExitStack() as stack:
        service, _, _ = _open(args, stack, control, job)
        before = service.ledger.actions_of(args.decision_id)
        try:
            action = getattr(service, how)(args.decision_id, int(time.time() * 1000))
        except ControlError as error:
            raise CliError(str(error)) from None
    if how == "retry":
        earlier = ", ".join(f"{a['action_id']} ({a['status']})" for a in before) or "none"
        print(f"decision {args.decision_id} retried on purpose as a new action "
              f"(earlier actions: {earlier}; they stay recorded)")
    print(f"decision {args.decision_id}: action {action['action_id']} {action['status']} "
          f"via {action['executor']} after {action['attempts']} attempt(s): "
          f"{action['response']}; verify after {action['verify_after']}")
    return 0 if action["status"] == "succeeded" else 1


def cmd_status(args: argparse.Namespace) -> int:
    from pipelines.control.ledger import Ledger, MemoryPublisher
    from pipelines.store.warehouse import Warehouse, redacted_url

    _, job = _configs(args)
    with Warehouse(args.warehouse or job.warehouse.url) as warehouse:
        recent = Ledger(warehouse, MemoryPublisher()).recent(max(1, args.limit))
        print(f"warehouse {redacted_url(warehouse.url)}")
    columns = {"decisions": ("decided_at", "decision_id", "status", "rule", "target",
                             "action", "parameters", "blocked_by", "reason"),
               "actions": ("executed_at", "action_id", "decision_id", "executor", "status",
                           "attempts", "verify_after", "response"),
               "verifications": ("verified_at", "action_id", "status", "baseline",
                                 "observed", "change_percent", "reason")}
    for name, rows in recent.items():
        print(f"\n{name} ({len(rows)} newest)")
        if rows:
            print("  " + " | ".join(columns[name]))
        for row in rows:
            print("  " + " | ".join(_shown(row[c]) for c in columns[name]))
    return 0


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
