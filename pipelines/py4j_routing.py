"""Keep PySpark's and PyFlink's Java-exception handlers to their own JVMs.

Both engines talk to their JVM through py4j, and each replaces py4j's one global
`get_return_value` with a handler that translates Java exceptions by calling back into
*its* JVM. With Spark and Flink in one Python process (a backfill next to a Flink job, or
one test session running both) the handler installed last sees every gateway's errors:
a Flink `NoSuchFieldException`, which PyFlink expects and catches while it walks a class
hierarchy, reaches Spark's handler, which asks Spark's JVM about an object id that only
Flink's JVM knows and fails with an unrelated `Py4JError`.

`route_by_gateway()` installs one dispatcher instead: a call made through Spark's gateway
gets Spark's handler, one made through Flink's gateway gets Flink's, anything else the
plain py4j one. Either engine may install its handler again later (a new SparkSession
does), so the pipelines call this at the points where they hand control to an engine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import py4j.java_gateway
import py4j.protocol

Handler = Callable[..., Any]

_plain: Handler = py4j.protocol.get_return_value  # py4j never patches this one itself
_handlers: dict[str, Handler] = {}


def _spark_client() -> object | None:
    context = sys.modules.get("pyspark")
    gateway = getattr(getattr(context, "SparkContext", None), "_gateway", None)
    return getattr(gateway, "_gateway_client", None)


def _flink_client() -> object | None:
    module = sys.modules.get("pyflink.java_gateway")
    gateway = getattr(module, "_gateway", None)
    return getattr(gateway, "_gateway_client", None)


def _handler(engine: str) -> Handler:
    """The engine's own translating handler, built once around the plain py4j one."""
    if engine not in _handlers:
        if engine == "spark":
            from pyspark.errors.exceptions.captured import capture_sql_exception

            _handlers[engine] = capture_sql_exception(_plain)
        else:
            from pyflink.util.exceptions import capture_java_exception

            _handlers[engine] = capture_java_exception(_plain)
    return _handlers[engine]


def _dispatch(answer: str, gateway_client: object, target_id: str | None = None,
              name: str | None = None) -> Any:
    if gateway_client is not None:
        if gateway_client is _spark_client():
            return _handler("spark")(answer, gateway_client, target_id, name)
        if gateway_client is _flink_client():
            return _handler("flink")(answer, gateway_client, target_id, name)
    return _plain(answer, gateway_client, target_id, name)


def route_by_gateway() -> None:
    """Make each engine's exception handler apply to its own gateway only (idempotent)."""
    py4j.java_gateway.get_return_value = _dispatch


def is_routed() -> bool:
    return py4j.java_gateway.get_return_value is _dispatch
