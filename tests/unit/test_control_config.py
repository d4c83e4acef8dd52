"""control.yaml: defaults, the shipped file, key paths of every kind of mistake, the secret
from the environment (never printed), and the CLI's one-line errors."""

from __future__ import annotations

import pytest
import yaml

from jobs.cli import main
from pipelines.control.config import (
    DEFAULT_CONTROL_CONFIG,
    DEFAULT_RULES,
    load_control_config,
    parse_control_config,
)
from pipelines.settings.job_config import ConfigError


def test_defaults_and_the_shipped_file_agree():
    shipped = load_control_config()
    assert shipped == parse_control_config({})
    assert yaml.safe_load(DEFAULT_CONTROL_CONFIG.read_text())["rules"] == DEFAULT_RULES
    assert shipped.mode == "dry_run" and shipped.metrics_port == 9464
    assert shipped.inputs.roi_topic == "roi_daily" and shipped.inputs.alerts_topic == "alerts"
    assert shipped.inputs.metrics_topic == "otlp_metrics"
    assert shipped.outputs.actions_topic == "control_actions"
    names = [rule.name for rule in shipped.rules]
    assert names == ["cut_budget_low_roi", "scale_out_hot_pool", "notify_roi_anomaly"]
    cut, scale, _ = shipped.rules
    assert (cut.when.threshold, cut.when.for_days, cut.then.percent) == (1.0, 3, -20.0)
    assert (cut.limits.max_per_day, cut.limits.max_change_per_week_percent) == (1, 50)
    assert (scale.when.threshold, scale.then.nodes, scale.limits.cooldown_s) == (0.8, 1, 300)


@pytest.mark.parametrize("data, named", [
    ({"mdoe": "auto"}, "unknown key(s) mdoe"),
    ({"inputs": {"roi": "x"}}, "unknown key(s) inputs.roi"),
    ({"pools": {"a100": {"gpus": ["g"], "slots": 3}}}, "unknown key(s) pools.a100.slots"),
    ({"executors": {"webhook": {"urll": "http://x"}}}, "unknown key(s) executors.webhook.urll"),
    ({"rules": [{**DEFAULT_RULES[0], "when": {"metrc": "roi"}}]}, "rules[0].when.metrc"),
    ({"rules": [DEFAULT_RULES[0], DEFAULT_RULES[0]]}, "rules[1].name"),
    ({"mode": "yolo"}, "mode must be one of dry_run, approval, auto"),
    ({"poll_interval_s": "often"}, "poll_interval_s must be a number"),
    ({"metrics_port": 70000}, "metrics_port must be a port"),
    ({"pools": {"a100": {}}}, "pools.a100 must give gpus"),
    ({"pools": {"a100": {"node": "n", "capacity": -1}}}, "pools.a100.capacity"),
    ({"gpu": {"window_s": 0}}, "gpu.window_s must be positive"),
    ({"executors": {"webhook": {"url": "ftp://x"}}}, "executors.webhook.url must be an http"),
    ({"executors": {"webhook": {"url": "http://x"}}}, "executors.webhook.secret is needed"),
    ({"executors": {"webhook": {"retries": -1}}}, "executors.webhook.retries"),
])
def test_mistakes_are_named_by_key_path(data, named):
    with pytest.raises(ConfigError) as error:
        parse_control_config(data)
    assert named in str(error.value)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "control.yaml"
    path.write_text("inputs:\n  roi_topik: x\n")
    with pytest.raises(ConfigError, match=f"{path}: unknown key.*inputs.roi_topik"):
        load_control_config(path)


def test_mode_override_and_pools(tmp_path):
    path = tmp_path / "control.yaml"
    path.write_text("pools:\n  ranking: {gpus: [GPU-1], capacity: 16}\n"
                    "  batch: {node: node-2}\n")
    config = load_control_config(path, mode="auto")
    assert config.mode == "auto"
    assert config.pool_of("GPU-1", "node-9", "NVIDIA H100") == "ranking"
    assert config.pool_of("GPU-2", "node-2", "NVIDIA H100") == "batch"
    assert config.pool_of("GPU-3", "node-3", "NVIDIA L40S") == "NVIDIA L40S"
    assert config.capacity_of("ranking") == 16 and config.capacity_of("batch") == 8


def test_secret_from_the_environment_never_prints(monkeypatch):
    monkeypatch.setenv("SEEDANCE_CONTROL_WEBHOOK_SECRET", "s3cr3t-value")
    config = parse_control_config({"executors": {"webhook": {"url": "https://hooks.example"}}})
    assert config.executors.webhook.secret.reveal() == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(config) and "s3cr3t-value" not in str(config)


def test_a_secret_in_a_readable_file_is_refused(tmp_path):
    path = tmp_path / "control.yaml"
    path.write_text("executors:\n  webhook: {url: 'http://x', secret: abc}\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="holds a secret"):
        load_control_config(path)
    path.chmod(0o600)
    assert load_control_config(path).executors.webhook.secret.reveal() == "abc"


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    path = tmp_path / "control.yaml"
    path.write_text("rules:\n  - {name: r, when: {metric: roi, dimension: campaign, "
                    "comparison: '<', threshold: x}, then: {action: notify}}\n")
    warehouse = f"sqlite:///{tmp_path / 'w.db'}"
    assert main(["control", "status", "--config", str(path), "--warehouse", warehouse]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(path) in err and "rules[0].when.threshold" in err


def test_cli_status_of_an_empty_warehouse(tmp_path, capsys):
    warehouse = f"sqlite:///{tmp_path / 'w.db'}"
    assert main(["control", "status", "--warehouse", warehouse]) == 0
    out = capsys.readouterr().out
    assert "decisions (0 newest)" in out and "verifications (0 newest)" in out



def test_safe_defaults_empty_rules_finite_thresholds_and_loopback_metrics():
    from pipelines.control.config import DEFAULT_RULES, parse_control_config
    from pipelines.settings.job_config import ConfigError

    assert len(parse_control_config({}).rules) == len(DEFAULT_RULES)  # no key: shipped rules
    assert parse_control_config({"rules": None}).rules == ()  # `rules:` left empty: none
    assert parse_control_config({"rules": []}).rules == ()
    infinite = [{**DEFAULT_RULES[0], "when": {**DEFAULT_RULES[0]["when"],
                                              "threshold": float("inf")}}]
    with pytest.raises(ConfigError, match="threshold: expected a finite number, got inf"):
        parse_control_config({"rules": infinite})
    assert parse_control_config({}).metrics_address == "127.0.0.1"


def test_a_yaml_infinite_threshold_is_refused_with_its_file(tmp_path):
    """`threshold: .inf` (YAML's infinity) in a control file: refused, naming the file."""
    from pipelines.control.config import DEFAULT_RULES

    rule = {**DEFAULT_RULES[0], "when": {**DEFAULT_RULES[0]["when"], "threshold": 0.0}}
    text = yaml.safe_dump({"rules": [rule]}).replace("threshold: 0.0", "threshold: .inf")
    assert ".inf" in text
    path = tmp_path / "control.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"control.yaml.*threshold: expected a finite number"):
        load_control_config(path)
