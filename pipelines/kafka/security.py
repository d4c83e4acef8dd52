"""One set of Kafka client settings (`kafka.properties` in the job config, the Java client's
names) for every client of the project: as they are for Flink's Java clients, with the
Kafka class names the Flink connector relocates rewritten, and translated for the Python
clients (kafka-python: the loader, the tools, the span exporter).

The Flink connector jar shades the Kafka client into `org.apache.flink.kafka.shaded.`: a
JAAS line naming `org.apache.kafka.common.security.scram.ScramLoginModule` fails in the job
with "No LoginModule found"; written the standard way, it is rewritten here.
"""

from __future__ import annotations

import os
import re
from typing import Any

SHADED = "org.apache.flink.kafka.shaded."
_KAFKA_CLASS = re.compile(r"(?<!shaded\.)\borg\.apache\.kafka\.")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def for_flink(properties: dict[str, str]) -> dict[str, str]:
    """The properties for the job's (relocated) Java Kafka clients."""
    return {key: _KAFKA_CLASS.sub(SHADED + "org.apache.kafka.", str(value))
            for key, value in properties.items()}


def for_python(properties: dict[str, str]) -> dict[str, Any]:
    """kafka-python keyword arguments for the same settings (security and TLS; the rest of
    the Java client's tuning has no counterpart and is left out)."""
    out: dict[str, Any] = {}
    protocol = properties.get("security.protocol")
    if protocol:
        out["security_protocol"] = protocol
    mechanism = properties.get("sasl.mechanism")
    if mechanism:
        out["sasl_mechanism"] = mechanism
    jaas = properties.get("sasl.jaas.config")
    if jaas:
        options = {name: _resolve(value) for name, value in _JAAS_OPTION.findall(jaas)}
        if "username" in options:
            out["sasl_plain_username"] = options["username"]
        if "password" in options:
            out["sasl_plain_password"] = options["password"]
    truststore = properties.get("ssl.truststore.location")
    if truststore:
        if properties.get("ssl.truststore.type", "").upper() != "PEM":
            raise ValueError("kafka.properties: the Python clients read a PEM truststore "
                             "only: set ssl.truststore.type: PEM")
        out["ssl_cafile"] = truststore
    if properties.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl_check_hostname"] = False
    return out


def _resolve(value: str) -> str:
    """${env:NAME} as Kafka's EnvVarConfigProvider resolves it."""
    def lookup(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in os.environ:
            raise ValueError(f"kafka.properties: sasl.jaas.config reads ${{env:{name}}}, "
                             "which is not set")
        return os.environ[name]
    return _ENV.sub(lookup, value)
