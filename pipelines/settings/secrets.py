"""A config file that holds a secret must not be readable by anyone else: checked when any
job's or tool's config is loaded, before anything uses it."""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_SECRET_KEY = re.compile(r"(secret|password|passwd|token|api[_.-]?key|credential)", re.I)


def secrets_in(data: Any, where: str = "") -> Iterator[str]:
    """The keys (dotted) of `data` whose values are secrets: a key named like one with a
    value, a URL with a password in it, a JAAS config with a literal password."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(value, dict | list):
                yield from secrets_in(value, path)
            elif value not in (None, "") and (_SECRET_KEY.search(str(key))
                                              or _holds_secret(str(value))):
                yield path
    elif isinstance(data, list):
        for at, value in enumerate(data):
            yield from secrets_in(value, f"{where}[{at}]")


def _holds_secret(value: str) -> bool:
    if "password=" in value and "${" not in value.split("password=", 1)[1][:3]:
        return True  # a JAAS line with a literal password
    if "://" in value:
        try:
            return bool(urlsplit(value.strip()).password)
        except ValueError:
            return False
    return False


def readable_secret(source: Path, data: Any) -> str | None:
    """What is wrong when `source` holds a secret and group or others may read it."""
    found = list(secrets_in(data))
    if not found:
        return None
    mode = stat.S_IMODE(Path(source).stat().st_mode)
    if not mode & 0o077:
        return None
    return (f"{source} holds a secret ({', '.join(found[:3])}) and can be read by group or "
            f"others (mode {mode:04o}): `chmod 600 {source}`, or move the secret to the "
            "environment")
