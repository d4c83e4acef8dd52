import pytest

from pipelines.kafka.address import resolve_bootstrap
from pipelines.settings.job_config import (
    ConfigError,
    StreamingJobConfig,
    load_config,
    order_mapping_text,
)
from pipelines.settings.stepping import group_linger_ms, group_records, step_interval_ms


def write(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_shipped_config_loads_with_documented_defaults():
    config = load_config()
    assert config.topics.spans == "otlp_spans"
    assert config.journey.lookback_days == 30
    assert len(config.attribution.models) == 8  # every model runs by default
    # the shipped file documents the defaults: it must say what the code does without it
    assert config == StreamingJobConfig()


def test_unknown_key_is_rejected_with_its_path(tmp_path):
    path = write(tmp_path, "journey:\n  lookback_dayz: 7\n")
    with pytest.raises(ConfigError, match=r"job.yaml: unknown key\(s\) journey.lookback_dayz"):
        load_config(path)


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(ConfigError, match="flink.parallelism must be a number"):
        load_config(write(tmp_path, "flink:\n  parallelism: two\n"))
    with pytest.raises(ConfigError, match="input.bounded must be true or false"):
        load_config(write(tmp_path, "input:\n  bounded: 'yes'\n"))


def test_invalid_values_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="attribution.models: unknown attribution model"):
        load_config(write(tmp_path, "attribution:\n  models: [linear, magic]\n"))
    with pytest.raises(ConfigError, match="input.encoding must be"):
        load_config(write(tmp_path, "input:\n  encoding: avro\n"))
    with pytest.raises(ConfigError, match=r"flink.user_buckets \(4\) must be at least "
                                          r"flink.parallelism \(6\)"):
        load_config(write(tmp_path, "flink:\n  parallelism: 6\n  user_buckets: 4\n"))
    with pytest.raises(ConfigError, match="event_time.watermark_interval_s must be positive"):
        load_config(write(tmp_path, "event_time:\n  watermark_interval_s: 0\n"))


def test_values_and_environment_overrides(tmp_path, monkeypatch):
    path = write(tmp_path, "journey:\n  lookback_days: 7\n  max_touches: 5\n"
                           "kafka:\n  bootstrap: broker:9092\n")
    assert load_config(path).kafka.bootstrap == "broker:9092"
    monkeypatch.setenv("SEEDANCE_KAFKA_BOOTSTRAP", "other:9093")
    config = load_config(path)
    assert (config.journey.lookback_days, config.journey.max_touches) == (7.0, 5)
    # kafka.bootstrap stays the file's; the variable wins where the address is resolved
    assert config.kafka.bootstrap == "broker:9092"
    assert resolve_bootstrap(None, config) == "other:9093"


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "journey: [\n"))


@pytest.mark.parametrize(("text", "message"), [
    ("roi:\n  stage_weights: {}\n", "roi.stage_weights must give every one of new, repeat, "
                                    "winback, unknown; missing new, repeat, winback, unknown"),
    ("roi:\n  stage_weights:\n", "roi.stage_weights is empty"),
    ("roi:\n  stage_weights: {new: 1, repeat: 1, winback: 1}\n",
     "roi.stage_weights must give every one of .*; missing unknown"),
    ("roi:\n  stage_weights: {new: -0.5, repeat: 1, winback: 1, unknown: 1}\n",
     r"roi.stage_weights.new must be a non-negative number, got -0.5"),
    ("roi:\n  stage_weights: {new: 1, repeat: 1, winback: 1, unknown: 1, loyal: 1}\n",
     r"unknown key\(s\) roi.stage_weights.loyal"),
    ("journey:\n  lookback_days: 0\n", "journey.lookback_days must be positive"),
    ("journey:\n  duplicate_order_days: -1\n", "journey.duplicate_order_days must be positive"),
    ("journey:\n  winback_days: 100\n  history_days: 50\n",
     "journey.history_days must be at least winback_days"),
])
def test_invalid_computation_settings_name_their_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_one_settings_value_carries_what_the_yaml_says(tmp_path):
    config = load_config(write(tmp_path, (
        "journey: {lookback_days: 7, max_touches: 3, duplicate_order_days: 2.5}\n"
        "attribution: {models: [linear, markov], half_life_days: 2, refit_every_s: 3600}\n"
        "roi: {stage_weights: {new: 1, repeat: 0.5, winback: 0.25, unknown: 0}}\n")))
    settings = config.computation
    assert settings.journey.lookback_ms == 7 * 86_400_000 and settings.journey.max_touches == 3
    assert settings.journey.duplicate_order_ms == int(2.5 * 86_400_000)
    assert (settings.per_conversion, settings.data_driven) == (("linear",), ("markov",))
    assert (settings.params.half_life_days, settings.refit_every_ms) == (2.0, 3_600_000)
    assert settings.stage_weights.as_mapping() == {"new": 1.0, "repeat": 0.5,
                                                   "winback": 0.25, "unknown": 0.0}
    assert settings.credit_lag_ms == 3_600_000  # the ROI job waits a refit period for credits
    with pytest.raises(AttributeError):
        settings.models = ("linear",)  # frozen: every engine gets the same value


def test_every_environment_variable_is_read_through_one_documented_list():
    """No module reads a SEEDANCE_ variable behind the list's back (the Airflow DAG, which
    runs without the project's packages, may read its own, if the list documents it)."""
    import re
    from pathlib import Path

    from pipelines.settings.environment import ENV_VARS

    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("pipelines/**/*.py"), *root.glob("jobs/**/*.py")]:
        text = path.read_text()
        for name in re.findall(r"SEEDANCE_[A-Z_]+", text):
            assert name in ENV_VARS, f"{path}: {name} is not in ENV_VARS"
        direct = re.findall(r"os\.environ(?:\.get)?[\[(]\s*[\"'](SEEDANCE_[A-Z_]+)", text)
        if path.name != "backfill_dag.py":
            assert not direct, f"{path} reads {direct} itself: use settings.environment"


def test_the_future_limit_is_a_setting_with_a_tight_default(tmp_path):
    from pipelines.settings.job_config import ConfigError, load_config

    assert load_config().event_time.max_future_s == 300
    path = tmp_path / "job.yaml"
    path.write_text("event_time:\n  max_future_s: 0\n")
    with pytest.raises(ConfigError, match="event_time.max_future_s"):
        load_config(path)


@pytest.mark.parametrize("argv,named", [
    (["generate", "--users", "-5"], "--users: must be at least 1, got -5"),
    (["generate", "--days", "0"], "--days: must be at least 1, got 0"),
    (["dashboard", "--port", "99999"], "--port: a port is 0 to 65535, got 99999"),
    (["dashboard", "--port", "http"], "--port: expected a port number, got 'http'"),
    (["generate", "--users", "many"], "--users: expected a whole number, got 'many'"),
    (["generate", "--gpu-busy", "0.9"], "--gpu-busy: must be from 0 to 0.8, got 0.9"),
    (["generate", "--gpu-busy", "half"], "--gpu-busy: expected a number, got 'half'"),
    (["cluster", "up", "--task-managers", "0"], "--task-managers: must be at least 1, got 0"),
])
def test_counts_and_ports_are_checked_before_anything_runs(argv, named, capsys):
    from jobs.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(named)


def test_watermark_steps_are_spaced_by_the_buckets_a_subtask_holds():
    config = load_config()
    assert step_interval_ms(config) == 1000  # the watermark interval
    assert step_interval_ms(config.replace("flink", user_buckets=256)) == 10_240
    assert step_interval_ms(config.replace("flink", user_buckets=256, parallelism=64)) == 1000
    assert step_interval_ms(config.replace("flink", user_buckets=256,
                                           step_interval_s=0.5)) == 500
    with pytest.raises(ConfigError, match="flink.step_interval_s must not be negative"):
        config.replace("flink", step_interval_s=-1.0)


def test_a_group_holds_several_records_per_bucket_of_a_subtask():
    config = load_config()
    assert group_records(config) == 64
    assert group_records(config.replace("flink", user_buckets=256)) == 1024
    assert group_records(config.replace("flink", user_buckets=256, parallelism=8)) == 128
    assert group_records(config.replace("flink", user_buckets=4096)) == 4096
    assert group_records(config.replace("flink", user_buckets=256, batch_records=16)) == 16


def test_a_group_waits_up_to_a_step_for_records_by_default():
    config = load_config()
    assert group_linger_ms(config) == step_interval_ms(config) == 1000
    many = config.replace("flink", user_buckets=256)
    assert group_linger_ms(many) == 10_240
    assert group_linger_ms(many.replace("flink", batch_linger_ms=50)) == 50
    with pytest.raises(ConfigError, match="flink.batch_linger_ms must not be negative"):
        config.replace("flink", batch_linger_ms=-1)


def test_an_order_change_stream_needs_a_mapping_named_relative_to_the_config(tmp_path):
    """The mapping is checked when the config loads (a mistake names the config, the
    mapping file and its line), and named absolutely, as the channel rules."""
    config = tmp_path / "job.yaml"
    config.write_text("order_changes: {topic: shop.shop.orders}\n")
    with pytest.raises(ConfigError, match="order_changes.mapping is needed"):
        load_config(config)
    (tmp_path / "orders.yaml").write_text(
        "columns: {order_id: id, user_id: customer_id, revenue: total}\n")
    config.write_text("order_changes: {topic: shop.shop.orders, mapping: orders.yaml}\n")
    loaded = load_config(config)
    assert loaded.order_changes.mapping == str((tmp_path / "orders.yaml").resolve())
    assert order_mapping_text(loaded)[0].startswith("columns:")
    (tmp_path / "orders.yaml").write_text("columns: {order_id: id, buyer: customer_id}\n")
    with pytest.raises(ConfigError, match=r"order_changes.mapping: .*orders.yaml, line 1"):
        load_config(config)
