"""The streaming jobs: `seedance run` (any job of pipelines/flink/jobs.py on Flink, here),
`seedance load` (their result topics into the warehouse) and `seedance report` (what the
warehouse holds). A job's failure becomes one line saying what failed and where its state is
(`resume_hint`)."""

from __future__ import annotations

import argparse
import re
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from jobs.commands.common import BOOTSTRAP_HELP, CONFIG_HELP, CliError, job_config
from pipelines.flink.jobs import ATTRIBUTION, DEFAULT_JOB, STREAMING_JOBS, unique
from pipelines.kafka.address import resolve_bootstrap
from pipelines.settings.job_config import StreamingJobConfig


def add_report(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    report = sub.add_parser("report", help="print the results held in the warehouse")
    report.add_argument("--config", help=CONFIG_HELP)
    report.set_defaults(func=cmd_report)


def add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    others = [name for name in STREAMING_JOBS if name != DEFAULT_JOB]
    p = sub.add_parser("run", help=f"run a streaming job on Flink: {DEFAULT_JOB} (default), "
                                   f"{', '.join(others[:-1])} or {others[-1]}")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    p.add_argument("--job", choices=list(STREAMING_JOBS), default=DEFAULT_JOB)
    p.add_argument("--bounded", action="store_true",
                   help="stop at the end of the input present at start")
    p.set_defaults(func=cmd_run)


def add_load(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("load", help="load result topics into the warehouse")
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--bootstrap", help=BOOTSTRAP_HELP)
    p.add_argument("--follow", action="store_true", help="keep loading new results")
    p.set_defaults(func=cmd_load)


def cmd_run(args: argparse.Namespace) -> int:
    config = job_config(args)
    bootstrap = resolve_bootstrap(args.bootstrap, config)
    until = "stops at the end of the input" if config.input.bounded else "Ctrl-C to stop"
    from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics
    from pipelines.kafka.security import for_python

    job, topics = STREAMING_JOBS[args.job], config.topics
    client = for_python(dict(config.kafka.properties))  # the job's own clients are Java
    # the attribution job's topics always: the other jobs read its input or its output
    # a spans topic made here takes records as they are stamped (a sample carries when each
    # would have arrived; docs/operations.md: LogAppendTime for a live one)
    ensure_topics(bootstrap, unique(ATTRIBUTION.topics(config) + job.topics(config)),
                  client=client, settings={**job.topic_settings(config),
                                           topics.spans: SAMPLE_SPANS_TOPIC})
    print(f"Running the {job.title} job on {bootstrap}: {job.describe(config)}; {until}")
    with resume_hint(config, job.flink_name, args.verbose):
        from pipelines.flink.runtime.kafka import run_job  # PyFlink: loaded when run

        run_job(job, config, bootstrap)
    if not job.keeps_accounting:
        return 0
    from pipelines.store.accounting import adds_up, format_report, latest_report

    report = latest_report(bootstrap, topics.accounting, client)
    if report:
        print(format_report(report, topics.dead_letter, topics.late))
        if not adds_up(report) or report.get("expired", 0):
            return 1
    return 0


@contextmanager
def resume_hint(config: StreamingJobConfig, job_name: str,
                verbose: bool = False) -> Iterator[None]:
    """A job that fails, or whose Flink JVM dies: one line with the root cause and where its
    state is (the Java trace with -v). A restart resumes journeys and offsets together from
    the newest checkpoint; only a checkpoint that cannot be restored gets the way out, with
    what it costs."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    from pipelines.flink.runtime.kafka import checkpoint_root, latest_checkpoint

    where = checkpoint_root(config, job_name)
    resumed = latest_checkpoint(where) if config.flink.resume else None
    try:
        yield
    except Py4JJavaError as error:
        if verbose:
            traceback.print_exc()
        cause = root_cause(error)
        if resumed is not None and _RESTORE_WORDS.search(cause):
            raise CliError(
                f"the {job_name} job failed after resuming from {resumed}: {cause}. That "
                "checkpoint cannot be restored here (written by another version or "
                "config?): restore it with the code and config that wrote it, or start "
                "without it (`flink.resume: false`, or another checkpoint_dir) knowing that "
                "its journeys in progress and order history are then not carried over "
                "(-v prints the Java trace)") from None
        raise CliError(f"the {job_name} job failed: {cause}. Its checkpoints are kept in "
                       f"{where}; `seedance run` again resumes from the newest (-v prints "
                       "the Java trace)") from None
    except (Py4JNetworkError, Py4JError, ConnectionError) as error:
        if verbose:
            traceback.print_exc()
        raise CliError(f"the Flink JVM running {job_name} exited ({type(error).__name__}); its "
                       f"checkpoints are kept in {where}; `seedance run` again resumes from "
                       "the newest") from None


# failures that follow another (a task already gone when an event reached it): never the
# reason to show
_CONSEQUENCES = ("TaskNotRunningException",)
# what a failure to restore a checkpoint says (Flink's metadata loader, state serializers,
# the journeys' own bucket-count check)
_RESTORE_WORDS = re.compile(r"magic number|rollback to checkpoint|cannot map (checkpoint|"
                            r"savepoint)|could not restore|restore (operation|state)|"
                            r"StateMigrationException|incompatible|user_buckets", re.I)


def root_cause(error: Exception) -> str:
    """The innermost Java exception's first line that is not merely a consequence (for a
    Python operator's failure, the Python exception), at most 600 characters."""
    try:
        chain, cause = [], error.java_exception  # type: ignore[attr-defined]
        while cause is not None and len(chain) < 50:
            chain.append(str(cause.toString()))
            cause = cause.getCause() if cause.getCause() != cause else None
        telling = [c for c in chain if not any(name in c.split(":")[0]
                                                for name in _CONSEQUENCES)]
        text = (telling or chain)[-1]
    except Exception:  # noqa: BLE001 - the JVM may be gone: say what we can
        text = str(error)
    line = " ".join(text.split())
    return line if len(line) <= 600 else line[:600] + "..."


FOLLOW_POLL_S = 2.0  # seedance load --follow: between two passes over the topics


def cmd_load(args: argparse.Namespace) -> int:
    from pipelines.kafka.security import for_python
    from pipelines.store.loading import TopicLoader
    from pipelines.store.warehouse import Warehouse, redacted_url

    config = job_config(args)
    bootstrap = resolve_bootstrap(args.bootstrap, config)
    warehouse = Warehouse(config.warehouse.url)
    loader = TopicLoader(warehouse, for_python(dict(config.kafka.properties)))

    try:
        if args.follow:
            print(f"loading every result topic into {redacted_url(warehouse.url)} as it "
                  "arrives (Ctrl-C to stop)")
            while True:  # each pass reads every topic to its end, offsets with the rows
                if any(n for _, n in loader.load_all(bootstrap, config)):
                    print(f"{time.strftime('%H:%M:%S')} loaded new results", flush=True)
                time.sleep(FOLLOW_POLL_S)
        loaded = loader.load_all(bootstrap, config)
    finally:
        warehouse.close()
    counts: dict[str, int] = {}  # per kind of message (both experiment topics: one)
    for load, n in loaded:
        counts[load.what] = counts.get(load.what, 0) + n
    parts = [f"{n} {what}" for what, n in counts.items()]
    print(f"loaded {', '.join(parts[:-1])} and {parts[-1]} into {redacted_url(warehouse.url)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from jobs.commands.report import print_gpu_summary, print_summary
    from pipelines.store import summaries
    from pipelines.store.warehouse import Warehouse, redacted_url

    config = job_config(args)
    warehouse = Warehouse(config.warehouse.url, create=False)
    try:
        has_credits = bool(summaries.totals(warehouse))
        has_gpu_costs = bool(summaries.gpu_cost_summary(warehouse)["interval_usd"])
        if has_credits:
            print_summary(warehouse)
        if has_gpu_costs:
            print_gpu_summary(warehouse)
        if not has_credits and not has_gpu_costs:
            print(f"{redacted_url(warehouse.url)} holds no results yet: run a job, then "
                  "`seedance load`")
    finally:
        warehouse.close()
    return 0
