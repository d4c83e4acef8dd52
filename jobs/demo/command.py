"""`seedance demo`, the command the demo brings (jobs/cli.py adds it, as it adds those of
jobs/backfill.py, jobs/reconcile.py and jobs/dashboard.py): the demo itself (run.py, with
all it imports) is loaded when the command runs."""

from __future__ import annotations

import argparse


def add_demo(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser("demo", help="stack up, sample telemetry, run the job, print results")
    demo.add_argument("--users", type=int, default=2000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--keep-stack", action="store_true",
                      help="leave the Kafka broker running afterwards")
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from jobs.demo.run import run_demo

    return run_demo(users=args.users, seed=args.seed, keep_stack=args.keep_stack)
