"""`seedance inspect`: what each span of some OTLP messages becomes in the jobs (a touch and
the rule that named its channel, an order, a GPU call, an exposure; ignored or a dead
letter, and why), read from a file or a topic, decoded by the jobs' own rules."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.commands.common import BOOTSTRAP_HELP, CONFIG_HELP, CliError, job_config, positive_int

if TYPE_CHECKING:
    from pipelines.settings.job_config import StreamingJobConfig

KINDS = ("touch", "order", "gpu_call", "exposure", "ignored", "dead_letter")


def add_inspect(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    inspect = sub.add_parser(
        "inspect", help="show what each span of OTLP messages becomes in the jobs: touch "
                        "(and the channel rule), order, GPU call, exposure, or ignored / "
                        "dead letter and why")
    inspect.add_argument("file", nargs="?",
                         help="a file of OTLP: one export request (protobuf or JSON), or "
                              "JSON lines, a request a line (the Collector's file exporter)")
    inspect.add_argument("--topic", help="read the messages of this Kafka topic instead, from "
                                         "its beginning")
    inspect.add_argument("--limit", type=positive_int, default=20,
                         help="messages at most (default 20)")
    inspect.add_argument("--encoding", choices=["auto", "otlp_proto", "otlp_json"],
                         default="auto")
    inspect.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    inspect.add_argument("--config", help=f"{CONFIG_HELP} (its channel rules, Kafka address "
                                          "and security)")
    inspect.add_argument("--order-changes", metavar="MAPPING",
                         help="read the messages as an orders table's change stream "
                              "(Debezium change events, or rows: the mapping's `format`), "
                              "its columns named by this mapping file (e.g. "
                              "jobs/config/order_changes.yaml), and show what each says of "
                              "its order: placed, corrected, refunded, deleted, or nothing")
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    from pipelines.codec.landings import use_channel_rules
    from pipelines.codec.span_report import inspect_message
    from pipelines.settings.job_config import channel_rules_text
    from udfs.traffic import parse_channel_rules

    if bool(args.file) == bool(args.topic):
        raise CliError("give a FILE or --topic, one of them")
    config = job_config(args)
    if args.order_changes:
        return _inspect_order_changes(args, config)
    use_channel_rules(parse_channel_rules(*channel_rules_text(config)),
                      config.journey.landing_user)
    sources = _file_messages(Path(args.file)) if args.file else _topic_messages(args, config)
    totals: Counter[str] = Counter()
    messages = 0
    for where, payload in islice(sources, args.limit):
        messages += 1
        report = inspect_message(payload, args.encoding, config.event_time.max_future_s)
        if report.unreadable:
            print(f"message {messages} ({where}): a dead letter as a whole: {report.unreadable}")
            totals["unreadable message"] += 1
            continue
        print(f"message {messages} ({where}, {len(report.spans)} spans):")
        for span in report.spans:
            print(f"  {span.span_id or '-'} {span.name!r}: {span.becomes.replace('_', ' ')}"
                  f" - {span.detail}")
            totals[span.becomes] += 1
    spans = sum(totals[kind] for kind in KINDS)
    counted = ", ".join(f"{totals[kind]} {kind.replace('_', ' ')}" for kind in KINDS)
    unreadable = totals["unreadable message"]
    print(f"{spans} spans in {messages} messages: {counted}"
          + (f"; {unreadable} messages unreadable" if unreadable else ""))
    return 0


def _inspect_order_changes(args: argparse.Namespace, config: StreamingJobConfig) -> int:
    from udfs.orders import (
        KINDS as CHANGE_KINDS,
    )
    from udfs.orders import (
        OrderChangeError,
        OrderMappingError,
        decode_order_change,
        load_order_mapping,
    )

    try:
        mapping = load_order_mapping(Path(args.order_changes))
    except OrderMappingError as error:
        raise CliError(str(error)) from None
    sources = _file_messages(Path(args.file)) if args.file else _topic_messages(args, config)
    totals: Counter[str] = Counter()
    messages = 0
    for where, payload in islice(sources, args.limit):
        messages += 1
        try:
            change = decode_order_change(payload, mapping)
        except OrderChangeError as error:
            print(f"message {messages} ({where}): dead letter - {error}")
            totals["dead_letter"] += 1
            continue
        totals[change.kind] += 1
        if not change.order_id:
            print(f"message {messages} ({where}): {change.kind} - {change.why}")
            continue
        before = "" if change.previous is None else f"{change.previous:.2f} -> "
        print(f"message {messages} ({where}): order {change.order_id} of "
              f"{change.user_id}: {change.kind} - {change.why}; revenue "
              f"{before}{change.revenue:.2f} {change.currency}")
    counted = ", ".join(f"{totals[kind]} {kind}" for kind in (*CHANGE_KINDS, "dead_letter"))
    print(f"{messages} messages: {counted}".replace("dead_letter", "dead letter"))
    return 0


def _file_messages(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CliError(f"file not found: {path}") from None
    except OSError as error:
        raise CliError(f"{path}: cannot read it: {error.strerror}") from None
    lines = data.splitlines()
    if len([line for line in lines if line.strip()]) > 1 and _json_object(lines[0]):
        # JSON lines, a request a line (a pretty-printed request's first line is no object)
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield f"{path} line {number}", line
        return
    yield str(path), data


def _json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.removeprefix(b"\xef\xbb\xbf")), dict)
    except ValueError:
        return False


def _topic_messages(args: argparse.Namespace,
                    config: StreamingJobConfig) -> Iterator[tuple[str, bytes]]:
    from pipelines.kafka.address import resolve_bootstrap
    from pipelines.kafka.io import read_all
    from pipelines.kafka.security import for_python

    bootstrap = resolve_bootstrap(args.bootstrap, config)
    client = for_python(dict(config.kafka.properties))
    for number, (_, value) in enumerate(read_all(bootstrap, args.topic, timeout_s=10.0,
                                                 client=client)):
        yield f"{args.topic} record {number}", value or b""
