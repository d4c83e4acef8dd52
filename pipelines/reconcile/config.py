"""Typed, validated configuration of the daily reconciliation (`seedance reconcile`).

Loaded from YAML (jobs/config/reconcile.yaml documents every key); unknown keys and wrong
types are rejected with the file and key named. Addresses and the webhook secret may come
from the environment (RECONCILE_ENV_VARS); the secret is a `Secret`, which never prints.
Also loads the two side files the config points at: exchange rates and the GPU resource map.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.reconcile.billing.meta import DEFAULT_PURCHASE_ACTIONS
from pipelines.settings.job_config import read_yaml
from pipelines.settings.paths import PROJECT_ROOT
from pipelines.settings.sections import (
    ConfigError,
    Secret,  # noqa: F401 (its sections' callers import it here)
    build_section,
)
from pipelines.settings.shared import (
    WAREHOUSE_URL,
    KafkaSection,
    WarehouseSection,
    WebhookSection,
    with_overrides,
)
from udfs.attribution import validate_models
from udfs.periods import parse_day, zone
from udfs.reconcile import METRICS, RateTable, Rule

DEFAULT_RECONCILE_CONFIG = (PROJECT_ROOT / "jobs" / "config"
                            / "reconcile.yaml")

RECONCILE_ENV_VARS = ("SEEDANCE_WAREHOUSE_URL", "SEEDANCE_KAFKA_BOOTSTRAP",
                      "SEEDANCE_WEBHOOK_URL", "SEEDANCE_WEBHOOK_SECRET")


@dataclass(frozen=True)
class MetricRule:
    threshold: float = 0.05
    min_volume: float = 0.0


@dataclass(frozen=True)
class Thresholds:
    spend: MetricRule = MetricRule(0.05, 10.0)
    conversions: MetricRule = MetricRule(0.05, 5.0)
    revenue: MetricRule = MetricRule(0.05, 50.0)
    compute_cost: MetricRule = MetricRule(0.05, 1.0)


@dataclass(frozen=True)
class BeamSection:
    runner: str = "DirectRunner"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class OursSection:
    attribution_model: str = "last_click"
    resource_map: str = ""


@dataclass(frozen=True)
class BillingSection:
    files: tuple[str, ...] = ()
    topic: str = ""
    default_currency: str = ""
    meta_purchase_actions: tuple[str, ...] = DEFAULT_PURCHASE_ACTIONS
    meta_attribution_window: str = ""
    focus_charge_categories: tuple[str, ...] = ("Usage", "Credit", "Adjustment")


@dataclass(frozen=True)
class AccountSection:
    time_zone: str = ""


@dataclass(frozen=True)
class CurrencySection:
    reporting: str = ""
    rates: dict[str, float] = field(default_factory=dict)
    rates_file: str = ""


@dataclass(frozen=True)
class AlertsSection:
    topic: str = "alerts"
    log: bool = True
    top_contributors: int = 5
    webhook: WebhookSection = WebhookSection()


@dataclass(frozen=True)
class ReconcileConfig:
    warehouse: WarehouseSection = WarehouseSection()
    kafka: KafkaSection = KafkaSection()
    beam: BeamSection = BeamSection()
    ours: OursSection = OursSection()
    billing: BillingSection = BillingSection()
    accounts: dict[str, AccountSection] = field(default_factory=dict)
    currency: CurrencySection = CurrencySection()
    thresholds: Thresholds = Thresholds()
    alerts: AlertsSection = AlertsSection()

    def __post_init__(self) -> None:
        currency_code = re.compile(r"[A-Z]{3}")
        checks = [(bool(self.beam.runner), "beam.runner", "must name a Beam runner"),
                  (self.alerts.top_contributors >= 0, "alerts.top_contributors",
                   "must not be negative"),
                  (self.alerts.webhook.timeout_s > 0, "alerts.webhook.timeout_s",
                   "must be positive"),
                  (self.alerts.webhook.retries >= 0, "alerts.webhook.retries",
                   "must not be negative"),
                  (self.alerts.webhook.backoff_s >= 0, "alerts.webhook.backoff_s",
                   "must not be negative"),
                  (not self.alerts.webhook.url
                   or self.alerts.webhook.url.startswith(("http://", "https://")),
                   "alerts.webhook.url", "must be an http:// or https:// URL"),
                  (not self.alerts.webhook.url or bool(self.alerts.webhook.secret),
                   "alerts.webhook.secret", "is needed to sign the webhook: set "
                                            "SEEDANCE_WEBHOOK_SECRET"),
                  (not self.currency.reporting
                   or bool(currency_code.fullmatch(self.currency.reporting)),
                   "currency.reporting", "must be an ISO 4217 code such as USD"),
                  (not self.billing.default_currency
                   or bool(currency_code.fullmatch(self.billing.default_currency)),
                   "billing.default_currency", "must be an ISO 4217 code such as USD"),
                  (bool(self.billing.meta_purchase_actions), "billing.meta_purchase_actions",
                   "must name at least one action type")]
        for name in METRICS:
            rule: MetricRule = getattr(self.thresholds, name)
            checks += [(rule.threshold >= 0, f"thresholds.{name}.threshold",
                        "must be a non-negative fraction (0.05 = 5 %)"),
                       (rule.min_volume >= 0, f"thresholds.{name}.min_volume",
                        "must not be negative")]
        for code, rate in self.currency.rates.items():
            checks.append((bool(currency_code.fullmatch(code)) and rate > 0,
                           f"currency.rates.{code}", "must map an ISO 4217 code to a "
                                                      "positive rate"))
        unknown = set(self.billing.focus_charge_categories) - {
            "Usage", "Purchase", "Tax", "Credit", "Adjustment"}
        checks.append((not unknown, "billing.focus_charge_categories",
                       f"has unknown categories {sorted(unknown)}"))
        for key, account in self.accounts.items():
            checks.append((key.count("/") == 1, f"accounts.{key}",
                           "must be named platform/account, e.g. google_ads/1234567890"))
            try:
                zone(account.time_zone)
            except ValueError as error:
                checks.append((False, f"accounts.{key}.time_zone", str(error)))
        for ok, key, problem in checks:
            if not ok:
                raise ConfigError(f"{key} {problem}")
        try:
            validate_models((self.ours.attribution_model,))
        except ValueError as error:
            raise ConfigError(f"ours.attribution_model: {error}") from None

    def rules(self) -> dict[str, Rule]:
        return {m: Rule(getattr(self.thresholds, m).threshold,
                        getattr(self.thresholds, m).min_volume) for m in METRICS}

    def time_zones(self) -> dict[tuple[str, str], str]:
        return {tuple(key.split("/", 1)): a.time_zone  # type: ignore[misc]
                for key, a in self.accounts.items() if a.time_zone}

    def replace(self, section: str, **changes: Any) -> ReconcileConfig:
        updated = dataclasses.replace(getattr(self, section), **changes)
        return dataclasses.replace(self, **{section: updated})


# --- loading -------------------------------------------------------------------------

def load_reconcile_config(path: Path | None = None) -> ReconcileConfig:
    """The config at `path` (the shipped defaults when None) with its environment overrides
    (pipelines/settings/shared.py)."""
    source = path or DEFAULT_RECONCILE_CONFIG
    data = read_yaml(source)
    try:
        config: ReconcileConfig = build_section(ReconcileConfig,
                                                with_overrides(data, ENV_OVERRIDES), "")
        return config
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None


ENV_OVERRIDES = (WAREHOUSE_URL,
                 (("alerts", "webhook", "url"), "SEEDANCE_WEBHOOK_URL"),
                 (("alerts", "webhook", "secret"), "SEEDANCE_WEBHOOK_SECRET"))


# --- side files ----------------------------------------------------------------------

def load_rates(config: ReconcileConfig) -> RateTable:
    """currency.rates (flat) and currency.rates_file (CSV date,currency,rate; a rate per
    day wins over the flat one; an empty date applies to every day)."""
    flat = dict(config.currency.rates)
    daily: dict[tuple[str, str], float] = {}
    if config.currency.rates_file:
        path = Path(config.currency.rates_file)
        if not path.is_file():
            raise ConfigError(f"currency.rates_file: no such file {path}")
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if not {"date", "currency", "rate"} <= set(reader.fieldnames or ()):
                raise ConfigError(f"{path}:1: header must be date,currency,rate")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                try:
                    rate = float(row["rate"])
                    code = row["currency"].strip().upper()
                    if not (rate > 0 and re.fullmatch(r"[A-Z]{3}", code)):
                        raise ValueError
                    day = row["date"].strip()
                    if day:
                        daily[(parse_day(day).isoformat(), code)] = rate
                    else:
                        flat[code] = rate
                except ValueError:
                    raise ConfigError(f"{where}: expected date (YYYY-MM-DD or empty), an ISO "
                                      f"4217 currency and a positive rate, got {row}") from None
    return RateTable(config.currency.reporting, flat, daily)


def load_resource_map(path_text: str) -> dict[str, str]:
    """gpu_uuid -> FOCUS ResourceId from a YAML mapping or a CSV `gpu_uuid,resource_id`;
    several GPUs may map to one resource (an 8-GPU VM is one line on the bill). Empty:
    the identity (the bill names GPUs by our UUIDs)."""
    if not path_text:
        return {}
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"ours.resource_map: no such file {path}")
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if not {"gpu_uuid", "resource_id"} <= set(reader.fieldnames or ()):
                raise ConfigError(f"{path}:1: header must be gpu_uuid,resource_id")
            mapping = {}
            for row in reader:
                if not (row["gpu_uuid"] or "").strip() or not (row["resource_id"] or "").strip():
                    raise ConfigError(f"{path}:{reader.line_num}: empty gpu_uuid or resource_id")
                mapping[row["gpu_uuid"].strip()] = row["resource_id"].strip()
            return mapping
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) and v for v in data.values()):
        raise ConfigError(f"{path}: must map each GPU UUID to a ResourceId (text)")
    return {str(k): v for k, v in data.items()}
