"""Reconciliation config (keys, types, env overrides, the secret), its side files, the CLI
date range, and the cron schedule (its line parsed by the CLI; the Airflow DAG runs under a
real Airflow in tests/integration/test_airflow.py)."""

import argparse
import re
import shlex
from datetime import date
from pathlib import Path

import pytest

from jobs.cli import build_parser
from jobs.reconcile import date_range, expand_billing_files
from pipelines.kafka.address import resolve_bootstrap
from pipelines.reconcile.billing import BillingError
from pipelines.reconcile.config import (
    ReconcileConfig,
    Secret,
    load_rates,
    load_reconcile_config,
    load_resource_map,
)
from pipelines.settings.job_config import ConfigError
from udfs.reconcile.drift import Rule

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEDULES = ROOT / "jobs" / "schedules"


def write(tmp_path, text, name="reconcile.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_config_documents_the_defaults():
    config = load_reconcile_config()
    assert config == ReconcileConfig()  # the YAML says exactly what the code defaults to
    assert config.rules()["conversions"] == Rule(0.05, 5.0)
    assert config.alerts.topic == "alerts" and config.beam.runner == "DirectRunner"
    text = (ROOT / "jobs" / "config" / "reconcile.yaml").read_text()
    for section in ("warehouse", "kafka", "beam", "ours", "billing", "accounts", "currency",
                    "thresholds", "alerts"):
        assert re.search(rf"^{section}:", text, re.M), section


def test_unknown_keys_and_wrong_types_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"reconcile.yaml: unknown key\(s\) "
                                          r"thresholds.spend.treshold"):
        load_reconcile_config(write(tmp_path, "thresholds:\n  spend: {treshold: 0.1}\n"))
    with pytest.raises(ConfigError, match="thresholds.revenue.threshold must be a number"):
        load_reconcile_config(write(tmp_path, "thresholds:\n  revenue: {threshold: 5%}\n"))
    with pytest.raises(ConfigError, match="alerts.log must be true or false"):
        load_reconcile_config(write(tmp_path, "alerts:\n  log: 'yes'\n"))
    with pytest.raises(ConfigError, match="accounts.google_ads/1.time_zone unknown time "
                                          "zone 'Mars/Base'"):
        load_reconcile_config(write(tmp_path, "accounts:\n  google_ads/1: {time_zone: "
                                              "Mars/Base}\n"))
    with pytest.raises(ConfigError, match="ours.attribution_model"):
        load_reconcile_config(write(tmp_path, "ours:\n  attribution_model: magic\n"))
    with pytest.raises(ConfigError, match="currency.rates.EUR must map"):
        load_reconcile_config(write(tmp_path, "currency:\n  rates: {EUR: -1}\n"))


def test_per_metric_thresholds(tmp_path):
    config = load_reconcile_config(write(tmp_path, "thresholds:\n  spend: {threshold: 0.02}\n"
                                                   "  compute_cost: {min_volume: 100}\n"))
    assert config.rules()["spend"] == Rule(0.02, 0.0)
    assert config.rules()["compute_cost"] == Rule(0.05, 100.0)


def test_webhook_needs_a_secret_which_comes_from_the_environment_and_never_prints(
        tmp_path, monkeypatch):
    path = write(tmp_path, "alerts:\n  webhook: {url: 'http://127.0.0.1:9/hook'}\n")
    with pytest.raises(ConfigError, match="alerts.webhook.secret is needed .* "
                                          "SEEDANCE_WEBHOOK_SECRET"):
        load_reconcile_config(path)
    monkeypatch.setenv("SEEDANCE_WEBHOOK_SECRET", "s3cr3t-value")
    monkeypatch.setenv("SEEDANCE_WEBHOOK_URL", "https://hooks.example/finance")
    monkeypatch.setenv("SEEDANCE_KAFKA_BOOTSTRAP", "broker:9092")
    monkeypatch.setenv("SEEDANCE_WAREHOUSE_URL", "sqlite:////tmp/x.db")
    config = load_reconcile_config(path)
    webhook = config.alerts.webhook
    assert webhook.url == "https://hooks.example/finance"
    assert webhook.secret.reveal() == "s3cr3t-value"
    assert config.warehouse.url == "sqlite:////tmp/x.db"
    assert resolve_bootstrap(None, config) == "broker:9092"  # ahead of kafka.bootstrap
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in str(webhook.secret)
    assert "s3cr3t" not in f"{config}"
    monkeypatch.delenv("SEEDANCE_WEBHOOK_URL")
    with pytest.raises(ConfigError, match="must be an http"):
        load_reconcile_config(write(tmp_path, "alerts:\n  webhook: {url: 'ftp://x'}\n"))


def test_secret_compares_by_value():
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b") and not Secret()


def test_rates_file_and_flat_rates(tmp_path):
    rates = write(tmp_path, "date,currency,rate\n2025-03-01,EUR,1.10\n,GBP,1.25\n", "rates.csv")
    config = load_reconcile_config(write(
        tmp_path, f"currency:\n  reporting: USD\n  rates: {{EUR: 1.05}}\n"
                  f"  rates_file: {rates}\n"))
    table = load_rates(config)
    assert table.rate("EUR", "2025-03-01") == 1.10
    assert table.rate("EUR", "2025-03-02") == 1.05
    assert table.rate("GBP", "2025-03-02") == 1.25 and table.rate("USD", "x") == 1.0
    bad = write(tmp_path, "date,currency,rate\n2025-03-01,EUR,zero\n", "bad.csv")
    with pytest.raises(ConfigError, match=r"bad.csv:2: expected date"):
        load_rates(config.replace("currency", rates_file=str(bad)))


def test_resource_map_from_yaml_or_csv(tmp_path):
    assert load_resource_map("") == {}
    yaml_map = write(tmp_path, "GPU-1: vm-a\nGPU-2: vm-a\n", "map.yaml")
    assert load_resource_map(str(yaml_map)) == {"GPU-1": "vm-a", "GPU-2": "vm-a"}
    csv_map = write(tmp_path, "gpu_uuid,resource_id\nGPU-1,vm-a\n", "map.csv")
    assert load_resource_map(str(csv_map)) == {"GPU-1": "vm-a"}
    with pytest.raises(ConfigError, match="map.csv:2: empty"):
        load_resource_map(str(write(tmp_path, "gpu_uuid,resource_id\nGPU-1,\n", "map.csv")))
    with pytest.raises(ConfigError, match="no such file"):
        load_resource_map(str(tmp_path / "nope.yaml"))


# --- the command line ----------------------------------------------------------------

def parse(*argv):
    return build_parser().parse_args(["reconcile", *argv])


def test_date_range_from_the_command_line():
    today = date(2025, 3, 5)
    assert date_range(parse("--date", "2025-03-01"), today) == ("2025-03-01", "2025-03-01")
    assert date_range(parse("--date", "yesterday"), today) == ("2025-03-04", "2025-03-04")
    assert date_range(parse("--from", "2025-02-27", "--to", "2025-03-01"), today) == \
        ("2025-02-27", "2025-03-01")
    assert date_range(parse("--days", "3"), today) == ("2025-03-02", "2025-03-04")
    for argv, message in ((("--from", "2025-03-02", "--to", "2025-03-01"), "ends"),
                          (("--from", "2025-03-02"), "--from D1 --to D2"),
                          (("--to", "2025-03-02"), "--to needs --from"),
                          ((), "give --date"),
                          (("--date", "1/3/2025"), "YYYY-MM-DD")):
        with pytest.raises(ValueError, match=message):
            date_range(parse(*argv), today)
    with pytest.raises(SystemExit):
        parse("--date", "2025-03-01", "--days", "2")


def test_billing_globs_keep_their_format_and_must_match(tmp_path):
    (tmp_path / "a.csv").write_text("")
    (tmp_path / "b.csv").write_text("")
    assert expand_billing_files((f"generic:{tmp_path}/*.csv",)) == [
        f"generic:{tmp_path}/a.csv", f"generic:{tmp_path}/b.csv"]
    with pytest.raises(BillingError, match="no billing file matches"):
        expand_billing_files((f"{tmp_path}/*.json",))


# --- schedules -----------------------------------------------------------------------

def test_cron_example_runs_the_cli_with_valid_arguments():
    lines = [line for line in (SCHEDULES / "cron.example").read_text().splitlines()
             if line and not line.startswith("#") and "=" not in line.split()[0]]
    (entry,) = lines
    fields = entry.split(None, 5)
    assert fields[:5] == ["0", "6", "*", "*", "*"]
    assert "%" not in fields[5]  # cron would cut the command at an unescaped %
    command = fields[5].split("&&")[-1].split(">>")[0]
    argv = shlex.split(command)
    assert argv[0].endswith("seedance")
    args = build_parser().parse_args(argv[1:])
    assert args.func.__name__ == "cmd_reconcile" and args.days == 3
    assert isinstance(args, argparse.Namespace)
