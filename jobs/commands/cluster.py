"""`seedance cluster`: a standalone Flink cluster on loopback (a JobManager and TaskManagers
from PyFlink's own distribution scripts) and jobs submitted to it with `flink run`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jobs.commands.common import BOOTSTRAP_HELP, CONFIG_HELP, CliError, positive_int
from pipelines.flink.jobs import DEFAULT_JOB, STREAMING_JOBS
from pipelines.flink.runtime.final_offsets import (
    commit_final_position,
    last_savepoint,
    record_submission,
    start_warning,
)
from pipelines.flink.runtime.standalone import ClusterError, StandaloneFlink


def add_cluster(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("cluster", help="a standalone Flink cluster on loopback: up, down, "
                                       "status; submit and stop jobs with `flink`")
    actions = p.add_subparsers(dest="action", required=True)
    up = actions.add_parser(
        "up", help="start a JobManager and TaskManagers; on a running cluster, start the "
                   "TaskManagers missing from --task-managers (replacing lost ones)")
    up.add_argument("--task-managers", type=positive_int, default=2)
    up.add_argument("--slots", type=positive_int, default=1,
                    help="task slots per TaskManager; a job at parallelism p takes p slots, "
                         "so 2 x 1 runs one job at parallelism 2 (or two at 1) at a time")
    actions.add_parser("down", help="stop the cluster")
    actions.add_parser("status", help="TaskManagers, slots and jobs")
    submit = actions.add_parser("submit", help="flink run --python jobs/flink_entry.py")
    submit.add_argument("--job", choices=list(STREAMING_JOBS), default=DEFAULT_JOB)
    submit.add_argument("--config", help=CONFIG_HELP)
    submit.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    submit.add_argument("--from-savepoint", metavar="PATH",
                        help="start from this savepoint; without it, a job whose consumer "
                             "group has read before starts with no state, and says so")
    stop = actions.add_parser("stop", help="stop a job with a savepoint (flink stop); its "
                                           "consumer group is left at the savepoint's "
                                           "position")
    stop.add_argument("job_id")
    stop.add_argument("--savepoint-dir", required=True, type=Path)
    stop.add_argument("--drain", action="store_true",
                      help="first the final watermark: every journey and day closes and is "
                           "committed (for a job that will not be resumed), also when the "
                           "job has caught up and its input partitions are idle")
    p.set_defaults(func=cmd_cluster)


def cmd_cluster(args: argparse.Namespace) -> int:
    from pipelines.kafka.address import resolve_bootstrap
    from pipelines.settings.job_config import DEFAULT_CONFIG, load_config

    cluster = StandaloneFlink()
    try:
        if args.action == "up":
            before = cluster.live_task_managers() if cluster.info() else 0
            info = cluster.up(args.task_managers, args.slots)
            started = max(info.task_managers - before, 0)
            print(f"Flink cluster up: {info.task_managers} TaskManagers running "
                  f"({started} started now) x {info.slots_per_task_manager} slots = "
                  f"{info.task_managers * info.slots_per_task_manager} slots (a job at "
                  f"parallelism p takes p), web UI and REST {info.rest}\n"
                  f"  logs {cluster.home / 'log'}")
        elif args.action == "down":
            cluster.down()
            print("Flink cluster stopped")
        elif args.action == "status":
            if cluster.info() is None:
                print("Flink cluster: not running (start it with `seedance cluster up`)")
                return 3
            print(json.dumps(cluster.status(), indent=2))
        elif args.action == "submit":
            config_file = Path(args.config) if args.config else None
            config = load_config(config_file)
            bootstrap = resolve_bootstrap(args.bootstrap, config)
            job = STREAMING_JOBS[args.job]
            if not args.from_savepoint:
                warning = start_warning(job, config, bootstrap, last_savepoint(
                    cluster.home, job, config_file or DEFAULT_CONFIG))
                if warning:
                    print(warning, file=sys.stderr, flush=True)
            job_id = cluster.submit(args.job, config_file or DEFAULT_CONFIG, bootstrap,
                                    savepoint=args.from_savepoint)
            # a stop finds the job's group, topics and Kafka settings here
            record_submission(cluster.home, job_id, args.job, config_file or DEFAULT_CONFIG,
                              bootstrap)
            print(f"submitted {args.job} as job {job_id} (parallelism "
                  f"{config.flink.parallelism}); `seedance cluster status` follows it")
        else:
            path = cluster.stop_with_savepoint(args.job_id, args.savepoint_dir,
                                               drain=args.drain)
            print(f"job {args.job_id} {'drained and ' if args.drain else ''}stopped; "
                  f"savepoint {path}")
            # the job's own commit of the savepoint's offsets is lost as it ends
            # (pipelines/flink/runtime/final_offsets.py): a job started from the group goes on
            # from there, reading nothing twice
            print(commit_final_position(cluster.home, args.job_id, path))
    except ClusterError as error:
        raise CliError(str(error)) from None
    return 0
