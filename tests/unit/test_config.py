import pytest

from pipelines.config import ConfigError, StreamingJobConfig, load_config


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
    assert config.kafka.bootstrap == "other:9093"


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "journey: [\n"))
