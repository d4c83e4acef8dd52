"""How every config file becomes typed values: one builder of frozen dataclass sections
from parsed YAML, used by the job, reconciliation and control configs alike.

Unknown keys are rejected (a typo must not fall back to a default) and every error names
the key path (`roi.stage_weights.new`, `rules[0].when.metric`). A section's own checks (a
`ValueError` from its `__post_init__`, phrased as "field problem") come out prefixed with
its path. A section listed in `complete` must give every key when it is given at all.
"""

from __future__ import annotations

import dataclasses
import hmac
import types
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Union, get_args, get_origin, get_type_hints


class ConfigError(ValueError):
    """A configuration problem, phrased as file + key + what is wrong."""


class Secret:
    """A string that does not show itself in reprs, logs or tracebacks."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(Secret)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__


def build_section(cls: type, data: Any, where: str = "",
                  complete: Mapping[type, tuple[str, ...]] | None = None) -> Any:
    """An instance of the dataclass `cls` from a parsed YAML mapping (None: the defaults);
    `where` is the key path so far ("" or ending with ".")."""
    complete = complete or {}
    if data is None and cls in complete:
        raise ConfigError(f"{where[:-1]} is empty; give every one of "
                          f"{', '.join(complete[cls])} (or leave the key out for the defaults)")
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where.rstrip('.') or 'the top level'} must be a mapping, "
                          f"got {data!r}")
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(map(str, data)) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(where + k for k in unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    missing = [k for k in complete.get(cls, ()) if k not in data]
    if missing:
        raise ConfigError(f"{where[:-1]} must give every one of {', '.join(complete[cls])}; "
                          f"missing {', '.join(missing)}")
    values = {name: _value(hints[name], raw, f"{where}{name}", complete)
              for name, raw in data.items()}
    try:
        return cls(**values)
    except ConfigError:
        raise
    except ValueError as error:  # the section's own rules; their messages start with a field
        raise ConfigError(f"{where}{error}") from None


def _value(hint: Any, raw: Any, key: str, complete: Mapping[type, tuple[str, ...]]) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    optional = origin in (Union, types.UnionType) and type(None) in args
    if raw is None and not (dataclasses.is_dataclass(hint) and hint in complete):
        if optional:
            return None
        raise ConfigError(f"{key} must not be null")
    if optional:
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _value(inner, raw, key, complete)
    if dataclasses.is_dataclass(hint):
        return build_section(hint, raw, key + ".", complete)  # type: ignore[arg-type]
    if hint is Secret:
        return Secret(str(raw))
    if hint is bool:
        if not isinstance(raw, bool):
            raise ConfigError(f"{key} must be true or false, got {raw!r}")
        return raw
    if hint is str:
        if isinstance(raw, dict | list):
            raise ConfigError(f"{key} must be text, got {raw!r}")
        return str(raw)
    if hint in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ConfigError(f"{key} must be a number, got {raw!r}")
        if hint is int and raw != int(raw):
            raise ConfigError(f"{key} must be a whole number, got {raw!r}")
        return hint(raw)
    if origin is tuple:
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise ConfigError(f"{key} must be a list of names, got {raw!r}")
        return tuple(raw)
    if origin is dict:
        if not isinstance(raw, dict):
            raise ConfigError(f"{key} must be a mapping, got {raw!r}")
        return {str(k): _value(args[1], v, f"{key}.{k}", complete) for k, v in raw.items()}
    raise ConfigError(f"{key}: unsupported type {hint}")
