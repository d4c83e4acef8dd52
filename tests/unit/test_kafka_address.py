"""Where Kafka is: --bootstrap > SEEDANCE_KAFKA_BOOTSTRAP > the config's kafka.bootstrap >
the local broker of `seedance stack up` > an error saying how to give one."""

import json
import os

import pytest

from pipelines.kafka import address
from pipelines.kafka.address import KafkaAddressError, resolve_bootstrap
from pipelines.reconcile.config import load_reconcile_config
from pipelines.settings.job_config import ConfigError, load_config


@pytest.fixture
def local_broker(monkeypatch):
    """The running local broker's address ('' for none), as the test sets it."""
    running = {"address": ""}
    monkeypatch.setattr(address, "local_broker_address", lambda: running["address"])
    monkeypatch.delenv("SEEDANCE_KAFKA_BOOTSTRAP", raising=False)
    return running


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("kafka:\n  bootstrap: from-file:9092\n")
    return load_config(path)


def test_the_flag_comes_first(local_broker, config, monkeypatch):
    local_broker["address"] = "127.0.0.1:1234"
    monkeypatch.setenv("SEEDANCE_KAFKA_BOOTSTRAP", "from-env:9092")
    assert resolve_bootstrap("from-flag:9092", config) == "from-flag:9092"


def test_then_the_environment(local_broker, config, monkeypatch):
    local_broker["address"] = "127.0.0.1:1234"
    monkeypatch.setenv("SEEDANCE_KAFKA_BOOTSTRAP", "from-env:9092")
    assert resolve_bootstrap(None, config) == "from-env:9092"
    assert resolve_bootstrap("", None) == "from-env:9092"


def test_then_the_config_file(local_broker, config):
    local_broker["address"] = "127.0.0.1:1234"
    assert resolve_bootstrap(None, config) == "from-file:9092"


def test_then_the_running_local_broker(local_broker):
    local_broker["address"] = "127.0.0.1:1234"
    assert resolve_bootstrap(None, load_config()) == "127.0.0.1:1234"
    assert resolve_bootstrap() == "127.0.0.1:1234"


def test_else_an_error_that_says_how_to_give_one(local_broker):
    with pytest.raises(KafkaAddressError) as raised:
        resolve_bootstrap(None, load_config())
    message = str(raised.value)
    for way in ("seedance stack up", "--bootstrap HOST:PORT", "SEEDANCE_KAFKA_BOOTSTRAP",
                "kafka.bootstrap"):
        assert way in message
    # every command reports a ConfigError as `seedance: error: ...`, exit code 2
    assert isinstance(raised.value, ConfigError)


def test_optional_kafka_gets_an_empty_address(local_broker):
    assert resolve_bootstrap(None, load_reconcile_config(), required=False) == ""


def test_the_reconcile_config_resolves_the_same_way(local_broker, tmp_path, monkeypatch):
    path = tmp_path / "reconcile.yaml"
    path.write_text("kafka:\n  bootstrap: from-file:9092\n")
    config = load_reconcile_config(path)
    assert resolve_bootstrap(None, config, required=False) == "from-file:9092"
    monkeypatch.setenv("SEEDANCE_KAFKA_BOOTSTRAP", "from-env:9092")
    assert resolve_bootstrap(None, config, required=False) == "from-env:9092"
    assert resolve_bootstrap("from-flag:9092", config, required=False) == "from-flag:9092"


def test_the_local_broker_is_the_one_stack_up_records(tmp_path, monkeypatch):
    # a record whose process is not that broker (a reused pid: this test's own) is no broker
    monkeypatch.setenv("SEEDANCE_HOME", str(tmp_path))
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "stack.json").write_text(json.dumps({
        "pid": os.getpid(), "bootstrap": "127.0.0.1:1", "controller_port": 2,
        "data_dir": str(tmp_path), "log_file": str(tmp_path / "log"), "started_at": 0.0}))
    assert address.local_broker_address() == ""
