"""Secured Kafka, really: a broker with TLS and SASL/SCRAM-SHA-512 (a certificate made with
keytool, the user made with Kafka's storage tool), and the span exporter, the attribution
job (`seedance run`) and the loader (`seedance load`) against it, with the client settings
of docs/operations.md: the standard Kafka class names (the job rewrites them to the
connector's relocated ones) and the password from the environment."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys

import yaml

from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.kafka.security import for_python
from pipelines.sources.generator import emit, plan_events
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from pipelines.stack.local_kafka import LocalKafka
from tests.reference import reference_credits

PASSWORD = "scram-pass-7f3a"


def test_exporter_job_and_loader_over_sasl_ssl(job_config, tmp_path, monkeypatch):
    broker = LocalKafka(tmp_path / "kafka", scram_user=("seedance", PASSWORD))
    info = broker.up()
    try:
        properties = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "config.providers": "env",
            "config.providers.env.class":
                "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                'required username="seedance" '
                                'password="${env:KAFKA_SASL_PASSWORD}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": info.ca_file,
            "ssl.endpoint.identification.algorithm": "https"}
        monkeypatch.setenv("KAFKA_SASL_PASSWORD", PASSWORD)
        client = for_python(properties)
        secure = info.secure_bootstrap
        config = job_config.replace("kafka", bootstrap=secure, properties=properties)
        config = config.replace("attribution", models=("last_click", "linear"))
        config = config.replace("warehouse", url=f"sqlite:///{tmp_path / 'wh.db'}")
        ensure_topics(secure, [config.topics.spans], client=client, config=SAMPLE_SPANS_TOPIC)

        plan = plan_events(120, seed=31)
        secured = producer(secure, **client)
        emit(plan, KafkaSpanExporter(secure, config.topics.spans, producer=secured),
             lambda payload: secured.send(config.topics.spans, payload).get(30), batch_size=8)
        secured.close()

        path = tmp_path / "job.yaml"
        # no secret in the file (the password comes from the environment): 0644 is fine
        path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
        env = {**os.environ, "SEEDANCE_HOME": str(tmp_path / "home")}
        outputs = []
        for command in (["run", "--config", str(path), "--bounded"],
                        ["load", "--config", str(path)]):
            done = subprocess.run([sys.executable, "-m", "jobs.cli", *command], env=env,
                                  capture_output=True, text=True, timeout=300,
                                  stdin=subprocess.DEVNULL)
            assert done.returncode == 0, done.stderr[-3000:]
            outputs.append(done.stdout)
        assert "adds up" in outputs[0]  # the job's accounting, read over SASL_SSL too
        expected = {(c.model, c.order_id, c.touch_index, c.channel)
                    for c in reference_credits(plan, config.attribution.models)}
        with sqlite3.connect(tmp_path / "wh.db") as db:
            loaded = set(db.execute("SELECT model, order_id, touch_index, channel "
                                    "FROM attribution_credits"))
        assert loaded == expected and len(expected) > 100
    finally:
        broker.down()


def test_a_wrong_password_says_the_login_was_refused(job_config, tmp_path, monkeypatch):
    """The broker refuses the login and closes the connection; kafka-python loses its answer
    and only times out. The error says that authentication failed (the broker's reason),
    not that no broker answered."""
    broker = LocalKafka(tmp_path / "kafka", scram_user=("seedance", PASSWORD))
    info = broker.up()
    try:
        properties = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                'required username="seedance" '
                                'password="${env:KAFKA_SASL_PASSWORD}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": info.ca_file}
        config = job_config.replace("kafka", bootstrap=info.secure_bootstrap,
                                    properties=properties)
        config = config.replace("warehouse", url=f"sqlite:///{tmp_path / 'wh.db'}")
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
        env = {**os.environ, "SEEDANCE_HOME": str(tmp_path / "home"),
               "KAFKA_SASL_PASSWORD": PASSWORD + "-typo"}
        done = subprocess.run([sys.executable, "-m", "jobs.cli", "load", "--config", str(path)],
                              env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stderr[-3000:]
        assert done.stderr.count("\n") == 1, done.stderr[-3000:]
        assert "authentication failed" in done.stderr.lower(), done.stderr
        assert "invalid credentials" in done.stderr and "no Kafka broker" not in done.stderr
    finally:
        broker.down()
