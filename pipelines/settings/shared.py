"""What several config files share: the Kafka, warehouse and webhook sections, and the one way
environment variables override a file's values.

Overrides go into the file's mapping before it is built, so a config's checks see the final
values (a webhook URL in the file, its secret in the environment). SEEDANCE_KAFKA_BOOTSTRAP
is not an override: `kafka.bootstrap` stays the file's, and
pipelines.kafka.address.resolve_bootstrap reads the variable ahead of it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipelines.settings.environment import setting
from pipelines.settings.sections import ConfigError, Secret


@dataclass(frozen=True)
class KafkaSection:
    # the file's address; where Kafka is: pipelines.kafka.address.resolve_bootstrap
    bootstrap: str = ""
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WarehouseSection:
    url: str = ""


@dataclass(frozen=True)
class WebhookSection:
    url: str = ""
    secret: Secret = Secret()
    timeout_s: float = 5.0
    retries: int = 3
    backoff_s: float = 0.5


# (key path, variable): the variable, when set, replaces the value at the key path
Override = tuple[tuple[str, ...], str]
WAREHOUSE_URL: Override = (("warehouse", "url"), "SEEDANCE_WAREHOUSE_URL")


def with_overrides(data: dict[str, Any], overrides: Iterable[Override]) -> dict[str, Any]:
    """A copy of a config file's mapping with the set variables of `overrides` in it (a
    ConfigError names a key on the way that is not a mapping)."""
    data = copy.deepcopy(data)
    for keys, variable in overrides:
        value = setting(variable)
        if value:
            _set(data, keys, value)
    return data


def _set(data: dict[str, Any], keys: tuple[str, ...], value: str) -> None:
    for i, name in enumerate(keys[:-1]):
        if data.get(name) is None:
            data[name] = {}
        if not isinstance(data[name], dict):
            raise ConfigError(f"{'.'.join(keys[:i + 1])} must be a mapping, got {data[name]!r}")
        data = data[name]
    data[keys[-1]] = value
