"""`seedance stack up|down|status`, the local Kafka broker, and `seedance demo`, which runs
everything on it once."""

from __future__ import annotations

import argparse
import time

from pipelines.stack.local_kafka import default_broker


def add_demo(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser("demo", help="stack up, sample telemetry, run the job, print results")
    demo.add_argument("--users", type=int, default=2000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--keep-stack", action="store_true",
                      help="leave the Kafka broker running afterwards")
    demo.set_defaults(func=cmd_demo)


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


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo import run_demo

    return run_demo(users=args.users, seed=args.seed, keep_stack=args.keep_stack)
