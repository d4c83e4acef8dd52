"""`seedance stack up|down|status`, the local Kafka broker (`seedance demo`, which runs
everything on it once, is the demo's own command: jobs/demo/command.py)."""

from __future__ import annotations

import argparse
import time

from pipelines.stack.local_kafka import default_broker


def add_stack(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stack = sub.add_parser("stack", help="the local Kafka broker (KRaft, loopback)")
    stack.add_argument("action", choices=["up", "down", "status"])
    stack.set_defaults(func=cmd_stack)


def cmd_stack(args: argparse.Namespace) -> int:
    kafka = default_broker()
    if args.action == "up":
        already = kafka.info()
        started = time.monotonic()
        info = kafka.up()
        verb = "already running" if already else f"started in {time.monotonic() - started:.1f}s"
        print(f"Kafka broker {verb}: bootstrap {info.bootstrap} (pid {info.pid})")
        print(f"  data {info.data_dir}\n  log  {info.log_file}")
    elif args.action == "down":
        print("Kafka broker stopped" if kafka.down() else "Kafka broker was not running")
    else:
        info = kafka.info()
        if info is None:
            print("Kafka broker: not running (start it with `seedance stack up`)")
            return 3
        print(f"Kafka broker: running, bootstrap {info.bootstrap}, pid {info.pid}, "
              f"up {time.time() - info.started_at:.0f}s\n  data {info.data_dir}")
    return 0
