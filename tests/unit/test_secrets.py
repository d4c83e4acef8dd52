"""Secrets stay secret: a config file that holds one must be private, tokens in a webhook
URL never reach a message, and the embedded warehouse is created readable by its owner
alone."""

from __future__ import annotations

import stat

import pytest

from pipelines.reconcile.alerts import redacted
from pipelines.reconcile.config import load_reconcile_config
from pipelines.settings.job_config import ConfigError
from pipelines.settings.secrets import secrets_in
from pipelines.store.warehouse import Warehouse


def test_a_config_holding_a_secret_must_be_private(tmp_path):
    path = tmp_path / "reconcile.yaml"
    path.write_text("alerts:\n  webhook:\n    url: https://hooks.example/x\n"
                    "    secret: s3cr3t\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"holds a secret \(alerts.webhook.secret\) and can "
                                          r"be read by group or others \(mode 0644\): "
                                          r"`chmod 600"):
        load_reconcile_config(path)
    path.chmod(0o600)
    assert load_reconcile_config(path).alerts.webhook.secret.reveal() == "s3cr3t"
    # without a secret in it, a readable file is fine (secrets from the environment)
    path.write_text("alerts:\n  topic: alerts\n")
    path.chmod(0o644)
    assert load_reconcile_config(path).alerts.topic == "alerts"


def test_what_counts_as_a_secret():
    found = list(secrets_in({
        "warehouse": {"url": "postgresql://loader:pw@db/wh"},
        "kafka": {"properties": {
            "sasl.jaas.config": 'ScramLoginModule required username="u" password="p";',
            "ssl.truststore.password": "changeit", "security.protocol": "SASL_SSL"}},
        "alerts": {"webhook": {"secret": ""}}}))
    assert found == ["warehouse.url", "kafka.properties.sasl.jaas.config",
                     "kafka.properties.ssl.truststore.password"]
    assert list(secrets_in({"kafka": {"properties": {
        "sasl.jaas.config": 'required username="u" password="${env:KAFKA_PASSWORD}";'}}})) == []


@pytest.mark.parametrize("url, hidden", [
    ("https://hooks.slack.example/services/T000/B000/XXXXSECRET", "XXXXSECRET"),
    ("https://alerts.example/hook?token=s3cr3t", "s3cr3t"),
    ("https://user:pa55@alerts.example/hook", "pa55"),
])
def test_tokens_in_webhook_urls_are_redacted(url, hidden):
    path = url.split("/", 3)[3]
    message = (f"ConnectionError: HTTPSConnectionPool(host='x', port=443): Max retries "
               f"exceeded with url: /{path} (refused); posting to {url}")
    out = redacted(message, url)
    assert hidden not in out and "/***" in out


def test_the_embedded_warehouse_is_private(tmp_path):
    warehouse = Warehouse(f"sqlite:///{tmp_path / 'new' / 'warehouse.db'}")
    warehouse.close()
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "warehouse.db").stat().st_mode) == 0o600
