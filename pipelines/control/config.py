"""Typed, validated configuration of the control loop (`seedance control`), from YAML.

jobs/config/control.yaml documents every key; every key is optional (the defaults below),
unknown keys and wrong types are rejected naming the file and the key path
(`pools.a100.capacity`, `rules[0].when.metric`). The rules follow udfs/control/rules.py's
schema. The webhook secret may come from SEEDANCE_CONTROL_WEBHOOK_SECRET (over the file's
`executors.webhook.secret`; applied before the config is built, pipelines/settings/shared.py);
it is a `Secret` and never prints. Kafka and the warehouse are the streaming job config's
(`--job-config`), and so are the ROI and metrics topics unless `inputs` names them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from pipelines.reconcile.config import AlertsSection
from pipelines.settings.job_config import (
    ConfigError,
    GpuConfig,
    StreamingJobConfig,
    TopicsConfig,
    read_yaml,
)
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.settings.sections import Secret, build_section
from pipelines.settings.shared import WebhookSection, with_overrides
from udfs.control import Rule, RuleError, parse_rules

DEFAULT_CONTROL_CONFIG = PROJECT_ROOT / "jobs" / "config" / "control.yaml"
MODES = ("dry_run", "approval", "auto")
SECRET_VAR = "SEEDANCE_CONTROL_WEBHOOK_SECRET"
ENV_OVERRIDES = ((("executors", "webhook", "secret"), SECRET_VAR),)
# inputs the streaming job config names: a key `inputs` leaves out is the job config's
JOB_TOPICS = (("roi_topic", "topics.roi"), ("metrics_topic", "gpu.metrics_topic"))

# The shipped rules (jobs/config/control.yaml repeats them; a unit test keeps both equal).
DEFAULT_RULES: list[dict[str, Any]] = [
    {"name": "cut_budget_low_roi",
     "when": {"metric": "roi", "dimension": "campaign", "model": "last_click",
              "comparison": "<", "threshold": 1.0, "for_days": 3},
     "then": {"action": "budget_change", "percent": -20},
     "limits": {"max_per_day": 1, "max_change_per_week_percent": 50},
     "settle_s": 172_800,
     "verify": {"metric": "roi", "min_change_percent": 10}},
    {"name": "scale_out_hot_pool",
     "when": {"metric": "pressure", "dimension": "pool", "comparison": ">", "threshold": 0.8},
     "then": {"action": "scale", "nodes": 1},
     "limits": {"cooldown_s": 300},
     "settle_s": 300,
     "verify": {"below": 0.8}},
    {"name": "notify_roi_anomaly",
     "when": {"metric": "roi", "dimension": "channel", "model": "last_click",
              "anomaly": {"direction": "drop"}},
     "then": {"action": "notify", "message": "ROI of the channel dropped anomalously"},
     "limits": {"max_per_day": 1}},
]


@dataclass(frozen=True)
class InputsSection:
    # the topics' defaults are the job config's and the reconciliation's; parsed with a job
    # config, the topics of JOB_TOPICS left out here are that config's
    roi_topic: str = TopicsConfig.roi  # the ROI job's results (kind=roi rows: a changelog)
    alerts_topic: str = AlertsSection.topic  # reconciliation alerts; '' for none
    metrics_topic: str = GpuConfig.metrics_topic  # OTLP metrics: GPU samples, queue gauge
    history_days: int = 90  # ROI data days kept (anomaly baselines need 28 + the streak)
    read_timeout_s: float = 30.0  # a poll gives up after this long without progress


@dataclass(frozen=True)
class GpuSection:
    window_s: float = 120.0  # samples older than this (before now) no longer count
    queue_metric: str = "seedance.pool.queue_depth"  # OTLP gauge, attribute `pool`
    default_capacity: float = 8.0  # request slots of a pool that does not give its own


@dataclass(frozen=True)
class PoolSection:
    gpus: tuple[str, ...] = ()  # GPU UUIDs in the pool
    node: str = ""  # or: every GPU of this host
    capacity: float = 0.0  # request slots; 0: gpu.default_capacity


@dataclass(frozen=True)
class ExecutorsSection:
    webhook: WebhookSection = WebhookSection()  # url '' : actions are recorded, not sent


@dataclass(frozen=True)
class OutputsSection:
    actions_topic: str = "control_actions"  # decisions, actions, verifications (JSON, kind)


@dataclass(frozen=True)
class ControlConfig:
    mode: str = "dry_run"
    poll_interval_s: float = 30.0
    metrics_port: int = 9464  # Prometheus /metrics; 0: off
    metrics_address: str = "127.0.0.1"  # loopback: expose it on purpose (e.g. 0.0.0.0)
    inputs: InputsSection = InputsSection()
    gpu: GpuSection = GpuSection()
    pools: dict[str, PoolSection] = field(default_factory=dict)
    executors: ExecutorsSection = ExecutorsSection()
    outputs: OutputsSection = OutputsSection()
    rules: tuple[Rule, ...] = ()  # set by load_control_config (default: DEFAULT_RULES)

    def __post_init__(self) -> None:
        hook = self.executors.webhook
        checks = [
            (self.mode in MODES, "mode", f"must be one of {', '.join(MODES)}, got "
                                         f"{self.mode!r}"),
            (self.poll_interval_s > 0, "poll_interval_s", "must be positive"),
            (0 <= self.metrics_port <= 65535, "metrics_port", "must be a port (0: off)"),
            (bool(self.inputs.roi_topic), "inputs.roi_topic", "must name a topic"),
            (self.inputs.history_days >= 1, "inputs.history_days", "must be at least 1"),
            (self.inputs.read_timeout_s > 0, "inputs.read_timeout_s", "must be positive"),
            (self.gpu.window_s > 0, "gpu.window_s", "must be positive"),
            (self.gpu.default_capacity > 0, "gpu.default_capacity", "must be positive"),
            (bool(self.outputs.actions_topic), "outputs.actions_topic", "must name a topic"),
            (hook.timeout_s > 0, "executors.webhook.timeout_s", "must be positive"),
            (hook.retries >= 0, "executors.webhook.retries", "must not be negative"),
            (hook.backoff_s >= 0, "executors.webhook.backoff_s", "must not be negative"),
            (not hook.url or hook.url.startswith(("http://", "https://")),
             "executors.webhook.url", "must be an http:// or https:// URL"),
            (not hook.url or bool(hook.secret), "executors.webhook.secret",
             f"is needed to sign the webhook: set {SECRET_VAR}"),
        ]
        for name, pool in self.pools.items():
            checks += [(bool(pool.gpus or pool.node), f"pools.{name}",
                        "must give gpus (UUIDs) or a node"),
                        (pool.capacity >= 0, f"pools.{name}.capacity", "must not be negative")]
        for ok, key, problem in checks:
            if not ok:
                raise ConfigError(f"{key} {problem}")

    def replace(self, **changes: Any) -> ControlConfig:
        return dataclasses.replace(self, **changes)

    def pool_of(self, gpu_uuid: str, hostname: str, model: str) -> str:
        """The pool a GPU belongs to: the first configured pool listing its UUID or its
        node, else its model name."""
        for name, pool in self.pools.items():
            if gpu_uuid in pool.gpus or (pool.node and pool.node == hostname):
                return name
        return model or "unknown"

    def capacity_of(self, pool: str) -> float:
        section = self.pools.get(pool)
        return section.capacity if section and section.capacity else self.gpu.default_capacity


def parse_control_config(data: dict[str, Any],
                         job: StreamingJobConfig | None = None) -> ControlConfig:
    """A ControlConfig from a YAML mapping (ConfigError naming the key path); the topics of
    JOB_TOPICS that `inputs` leaves out are `job`'s (with no job: its defaults)."""
    data = with_overrides(data, ENV_OVERRIDES)
    given = "rules" in data
    raw_rules = data.pop("rules", None)
    try:
        # no `rules` key: the shipped rules; `rules:` left empty (or []): no rules at all --
        # an empty list must never turn into budget-cutting defaults behind one's back
        rules = parse_rules({"rules": (raw_rules or []) if given else DEFAULT_RULES})
    except RuleError as error:
        raise ConfigError(str(error)) from None
    if job is not None:
        if data.get("inputs") is None:
            data["inputs"] = {}
        if isinstance(data["inputs"], dict):  # else build_section names the mistake
            for key, path in JOB_TOPICS:
                data["inputs"].setdefault(key, attrgetter(path)(job))
    config: ControlConfig = build_section(ControlConfig, data, "")
    return config.replace(rules=rules)


def load_control_config(path: Path | None = None, mode: str | None = None,
                        job: StreamingJobConfig | None = None) -> ControlConfig:
    """The config at `path` (the shipped one when None), `mode` overriding the file's, the
    topics it leaves out `job`'s."""
    source = path or DEFAULT_CONTROL_CONFIG
    data = read_yaml(source)
    if mode is not None:
        data["mode"] = mode
    try:
        return parse_control_config(data, job)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None


__all__ = ["DEFAULT_RULES", "MODES", "ControlConfig", "PoolSection", "Secret",
           "load_control_config", "parse_control_config"]
