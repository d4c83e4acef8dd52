"""Where Kafka is: the one place a command's flag, the environment, a config file and the local
broker become a bootstrap address.

The order, first found wins:

1. the command's flag, `--bootstrap HOST:PORT`;
2. the environment, `SEEDANCE_KAFKA_BOOTSTRAP`;
3. the config file's `kafka.bootstrap` (streaming, backfill's streaming or reconcile config);
4. the local broker that `seedance stack up` started, when it runs;
5. else an error naming these ways (or '' where Kafka is optional).

The config loaders do not apply `SEEDANCE_KAFKA_BOOTSTRAP` themselves: a config's
`kafka.bootstrap` is the file's value, and `resolve_bootstrap` is the only reader of the
variable.
"""

from __future__ import annotations

from typing import Protocol

from pipelines.settings.environment import setting
from pipelines.settings.job_config import ConfigError
from pipelines.stack.local_kafka import default_broker

ENV_VAR = "SEEDANCE_KAFKA_BOOTSTRAP"
HOW_TO_SET = ("start the local one with `seedance stack up`, or pass --bootstrap HOST:PORT "
              f"(or set {ENV_VAR}, or kafka.bootstrap in the config)")


class KafkaAddressError(ConfigError):
    """No Kafka address is configured and no local broker runs; the message says how to
    give one."""


class _KafkaSection(Protocol):
    @property
    def bootstrap(self) -> str: ...


class _WithKafka(Protocol):
    @property
    def kafka(self) -> _KafkaSection: ...


def local_broker_address() -> str:
    """The bootstrap address of the broker `seedance stack up` runs, '' when none runs."""
    info = default_broker().info()
    return info.bootstrap if info else ""


def resolve_bootstrap(flag: str | None = None, config: _WithKafka | None = None, *,
                      required: bool = True) -> str:
    """The Kafka bootstrap address, in the module's order. With `required`, no address
    raises KafkaAddressError; without, it is ''."""
    address = (flag or setting(ENV_VAR)
               or (config.kafka.bootstrap if config is not None else "")
               or local_broker_address()).strip()
    if not address and required:
        raise KafkaAddressError(f"no Kafka broker: {HOW_TO_SET}")
    return address
