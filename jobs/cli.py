"""The `seedance` command line: the parser, assembled from the command modules (jobs/commands/
and the jobs that bring their own commands), and the one place errors become messages and
exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import traceback
from pathlib import Path

from kafka.errors import KafkaConnectionError, KafkaTimeoutError, SaslAuthenticationFailedError

from jobs import backfill, dashboard, demo, reconcile
from jobs.commands import (
    attribute,
    cluster,
    experiments,
    inputs,
    inspect,
    intervals,
    ltv,
    stack,
    stream,
    verify,
)
from jobs.commands.common import CliError
from jobs.commands.control import add_control
from pipelines.settings.environment import env_help
from pipelines.settings.job_config import ConfigError, load_config
from pipelines.stack.local_kafka import StackError

__all__ = ["CliError", "build_parser", "main"]

# failures that are the user's to fix: one line, exit code 2 (ConfigError and the inputs'
# errors are ValueErrors; OSError: a file that is a folder, unreadable, a refused port)
USER_ERRORS = (CliError, ConfigError, StackError, OSError, ValueError)

# in the order `seedance --help` lists them
COMMANDS = (demo.add_demo, attribute.add_attribute, inputs.add_probe, stack.add_stack,
            inputs.add_generate, inspect.add_inspect, inputs.add_spend, stream.add_report,
            dashboard.add_parser,
            stream.add_run, stream.add_load, experiments.add_experiments,
            experiments.add_incrementality, intervals.add_intervals,
            ltv.add_ltv, cluster.add_cluster, add_control,
            reconcile.add_parser, verify.add_verify, backfill.add_parsers)


def build_parser() -> argparse.ArgumentParser:
    env_lines = env_help()
    parser = argparse.ArgumentParser(
        prog="seedance",
        description="Streaming telemetry and ROI attribution: OpenTelemetry spans through "
                    "Kafka into Flink, credited to marketing channels.",
        epilog=f"environment variables:\n{env_lines}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # kafka-python logs every refused connection while a broker starts; failures that
        # matter reach the user as errors anyway.
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        # py4j logs every call of a JVM that died, hundreds of lines; the error says it once.
        # Not by level: PyFlink sets py4j.java_gateway's own when it starts its gateway, and
        # py4j logs some of it on the root logger
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_py4j)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("seedance: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - the one place errors become messages
        if args.verbose:
            traceback.print_exc()
        _forget_a_dead_flink_jvm()
        _quiet_py4j_from_here_on()
        print(f"seedance: error: {error_line(error, args)}", file=sys.stderr)
        return 2 if isinstance(error, USER_ERRORS + KAFKA_ERRORS) else 1


def _not_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def _forget_a_dead_flink_jvm() -> None:
    """Python still holds objects of a Flink JVM that died (killed, out of memory). py4j
    releases each at exit by calling that JVM and logs a traceback for every one it cannot
    reach, after the error line; marked disconnected, they are dropped quietly."""
    module = sys.modules.get("pyflink.java_gateway")
    client = getattr(getattr(module, "_gateway", None), "_gateway_client", None)
    if client is None or not getattr(client, "is_connected", False):
        return
    try:
        socket.create_connection((client.address, client.port), timeout=2).close()
    except OSError:
        client.is_connected = False


def _quiet_py4j_from_here_on() -> None:
    """The error line is the last: with -v too, what py4j still logs (objects released by
    other threads and at exit, calls a dying JVM refuses) would only follow it. A record
    another thread is writing now is let finish first (each handler's lock): it passed
    the filter before it was set."""
    for handler in logging.getLogger().handlers:
        if _not_py4j not in handler.filters:
            handler.addFilter(_not_py4j)
        handler.acquire()
        handler.release()


KAFKA_ERRORS = (KafkaConnectionError, KafkaTimeoutError, SaslAuthenticationFailedError)


def error_line(error: BaseException, args: argparse.Namespace) -> str:
    """One line that says what failed and, where it helps, what to check."""
    server = getattr(args, "bootstrap", None) or "the configured bootstrap"
    if isinstance(error, SaslAuthenticationFailedError):
        return (f"the Kafka broker at {server} refused the login: {error} (check the SASL "
                "user and password in kafka.properties' sasl.jaas.config and the variable "
                "it reads, e.g. KAFKA_SASL_PASSWORD)")
    if isinstance(error, KafkaConnectionError | KafkaTimeoutError):
        refusal = login_refusal(args)
        if refusal:
            return (f"the Kafka broker at {server} answers but refused the login "
                    f"(authentication failed): {refusal} (check the SASL user and password "
                    "in kafka.properties' sasl.jaas.config and the variable it reads, e.g. "
                    "KAFKA_SASL_PASSWORD)")
        return (f"no Kafka broker answered at {server}: {error} (check --bootstrap or "
                "SEEDANCE_KAFKA_BOOTSTRAP, and that the broker runs)")
    if isinstance(error, USER_ERRORS):
        return str(error)
    lines = str(error).strip().splitlines()  # a JVM's error ends with its reason
    return f"{type(error).__name__}: {lines[-1] if lines else ''} (-v shows the traceback)"


def login_refusal(args: argparse.Namespace) -> str | None:
    """The broker's reason for refusing the SASL login of the command's Kafka settings (its
    --config, or the shipped one), None when it uses no SASL or nothing answers: a Python
    client that was refused reports only that the bootstrap timed out."""
    from types import SimpleNamespace

    from pipelines.kafka.address import resolve_bootstrap
    from pipelines.kafka.login import login_refusal as refusal_of
    from pipelines.kafka.security import for_python
    from pipelines.reconcile.config import load_reconcile_config

    path = Path(args.config) if getattr(args, "config", None) else None
    try:
        if getattr(args, "command", None) == "reconcile":
            kafka = load_reconcile_config(path).kafka
        else:
            kafka = load_config(path).kafka
        client = for_python(dict(kafka.properties))
        bootstrap = resolve_bootstrap(getattr(args, "bootstrap", None),
                                      SimpleNamespace(kafka=kafka), required=False)
    except Exception:  # noqa: BLE001 - a diagnosis only: without it, the plain message
        return None
    return refusal_of(bootstrap, client)


if __name__ == "__main__":
    sys.exit(main())
