from __future__ import annotations

import pytest

from pipelines.kafka.security import SHADED, for_flink, for_python

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="job" password="${env:KAFKA_SASL_PASSWORD}";')


def test_the_job_gets_the_connectors_relocated_class_names():
    props = for_flink({"sasl.jaas.config": JAAS, "security.protocol": "SASL_SSL",
                       "config.providers.env.class":
                           "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
                       "already": SHADED + "org.apache.kafka.x.Y"})
    assert props["sasl.jaas.config"].startswith(
        "org.apache.flink.kafka.shaded.org.apache.kafka.common.security.scram.")
    assert props["config.providers.env.class"] == (
        "org.apache.flink.kafka.shaded.org.apache.kafka.common.config.provider."
        "EnvVarConfigProvider")
    assert props["already"] == SHADED + "org.apache.kafka.x.Y"  # not shaded twice
    assert props["security.protocol"] == "SASL_SSL"


def test_python_clients_get_the_same_settings(monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw")
    assert for_python({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                       "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM",
                       "ssl.truststore.location": "/ca.pem", "linger.ms": "5"}) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "job", "sasl_plain_password": "pw", "ssl_cafile": "/ca.pem"}
    monkeypatch.delenv("KAFKA_SASL_PASSWORD")
    with pytest.raises(ValueError, match=r"\$\{env:KAFKA_SASL_PASSWORD\}, which is not set"):
        for_python({"sasl.jaas.config": JAAS})
    with pytest.raises(ValueError, match="PEM truststore only"):
        for_python({"ssl.truststore.location": "/ts.jks"})
