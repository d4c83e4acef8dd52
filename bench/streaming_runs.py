"""bench/streaming.py's runs of the attribution job and what each one gives.

A measurement is a pair: the job on an empty topic (start-up and shutdown alone), then on
the data; the difference is the time on the data. A start-up run that takes longer than the
data run voids the pair (the machine was busy with something else): it is said, and the
pair is measured again, up to ATTEMPTS times, after which the run is reported as not
measured. Nothing is clamped.

A run on the data is
  bounded   the job reads the topic to its end and finishes (`seedance run --bounded`);
  catch-up  the topic is published first, then the job runs unbounded (as `seedance run`
            does) and is stopped with a drain (the final watermark, a savepoint, its sinks
            committed) once its consumer group's committed offsets reach the end of the
            topic; the time runs from its start to its end, as a bounded run's does, and
            includes the wait for the checkpoint that commits the last offsets (the lag is
            checked once a second).
Each run's credits that hold (each conversion's latest) are reduced to a digest, the same
for every run of one population when the credits depend on the events alone.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.run_results import (
    CheckpointWatcher,
    committed_values,
    corrected_conversions,
    credit_digest,
)
from pipelines.flink.attribution.job import build_pipeline, run_job
from pipelines.flink.jobs import ATTRIBUTION
from pipelines.flink.runtime.standalone import StandaloneFlink
from pipelines.kafka.io import ensure_topics, read_all
from tests.job_io import drain, wait_until_consumed

ATTEMPTS = 3  # start-up + data pairs tried before a run is reported as not measured
CATCH_UP_TIMEOUT_S = 1800.0  # a catch-up whose offsets do not reach the end by then fails


class NotCaughtUp(RuntimeError):
    """An unbounded run whose committed offsets did not reach the end of its topic."""


@dataclasses.dataclass
class Run:
    engine: str
    partitions: int
    parallelism: int
    publish: str
    mode: str  # bounded or catch-up
    round: int
    buckets: int = 0  # user buckets; 0: the config's (at least the parallelism)
    rate: float | None = None  # spans/s on the data; None: not measured
    late: int | None = None
    expired: int | None = None  # of the late, lost behind the job's state (an alarm)
    processed: int | None = None
    corrected: int | None = None
    credit_rows: int = 0
    digest: str | None = None  # None: the job did not finish its run
    state: int = 0
    attempts: list[str] = dataclasses.field(default_factory=list)  # every digest seen
    # spans per CPU second of the in-process Flink on the data (its CPU on the data run
    # less on the start-up run); None: not measured (a standalone cluster's processes)
    per_cpu: float | None = None

    @property
    def shape(self) -> str:
        return f"{self.partitions}x{self.parallelism}" + (f"/{self.buckets}b" if self.buckets
                                                           else "")


def _config_file(config, name: str) -> Path:
    import yaml

    path = Path(config.flink.checkpoint_dir) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    return path


def job_seconds(config, bootstrap: str, name: str,
                cluster: StandaloneFlink | None = None) -> float:
    """A bounded run, start to end: in this process's MiniCluster, or submitted to the
    standalone cluster with `flink run` (client start-up included, like the MiniCluster's)."""
    started = time.perf_counter()
    if cluster is None:
        run_job(config, bootstrap, job_name=name)
    else:
        job = cluster.submit("attribution", _config_file(config, name), bootstrap)
        cluster.wait_for_job(job, timeout_s=1800)
    return time.perf_counter() - started


def catch_up_seconds(config, bootstrap: str, name: str,
                     cluster: StandaloneFlink | None = None) -> float:
    """An unbounded run over a topic published beforehand, stopped with a drain once the
    job's committed offsets reach the end of the topic; start to end (NotCaughtUp if they
    do not within CATCH_UP_TIMEOUT_S)."""
    config = config.replace("input", bounded=False)
    ensure_topics(bootstrap, ATTRIBUTION.topics(config),
                  settings=ATTRIBUTION.topic_settings(config))  # as `seedance run` does
    final = Path(config.flink.checkpoint_dir) / f"{name}-final"
    started = time.perf_counter()
    if cluster is not None:
        job_id = cluster.submit("attribution", _config_file(config, name), bootstrap)
        try:
            wait_until_consumed(bootstrap, config, CATCH_UP_TIMEOUT_S)
        except AssertionError as error:
            cluster.cancel_unfinished()
            raise NotCaughtUp(str(error)) from None
        cluster.stop_with_savepoint(job_id, final, drain=True)
        return time.perf_counter() - started
    # run_pipeline's MiniCluster, started without waiting for the job to end
    from pyflink.datastream import StreamExecutionEnvironment

    from pipelines.flink.runtime.kafka import (
        flink_configuration,
        prefer_this_python,
        separate_python_workers,
    )
    from pipelines.py4j_routing import route_by_gateway

    prefer_this_python()
    separate_python_workers(config)
    env = StreamExecutionEnvironment.get_execution_environment(
        flink_configuration(config, job_name=name))
    env.set_parallelism(config.flink.parallelism)
    route_by_gateway()
    build_pipeline(env, config, bootstrap)
    job = env.execute_async(name)
    try:
        wait_until_consumed(bootstrap, config, CATCH_UP_TIMEOUT_S)
    except AssertionError as error:
        job.cancel().result()
        raise NotCaughtUp(str(error)) from None
    drain(job, final)
    job.get_job_execution_result().result()
    return time.perf_counter() - started


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the fields after the command's name


def flink_cpu_s() -> float | None:
    """CPU seconds used so far by this process's in-process Flink (the PyFlink gateway
    JVM that runs the MiniCluster: the job's Java and, in thread mode, its Python) and its
    children (process mode's Python workers, live or ended); None: no such JVM (Linux
    only)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[str, str] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields:
            parents[entry.name] = fields[1]
    me = str(os.getpid())
    gateway = next((pid for pid, parent in parents.items() if parent == me
                    and b"PythonGatewayServer" in _cmdline(pid)), None)
    if gateway is None:
        return None
    tree, total = [gateway], 0.0
    while tree:
        pid = tree.pop()
        fields = _stat(pid)
        if fields:  # utime, stime, and the ended children's (process mode's workers)
            total += sum(int(fields[k]) for k in (11, 12, 13, 14)) / tick
        tree += [child for child, parent in parents.items() if parent == pid]
    return total


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def final_accounting(bootstrap: str, topic: str) -> dict:
    import json

    rows = [json.loads(v) for _, v in read_all(bootstrap, topic)]
    return next((r for r in rows if r.get("final")), rows[-1] if rows else {})


def warm_up(base, bootstrap: str, topic: str, name: str) -> float:
    """One run on an empty topic, not measured: the in-process Flink started (its JVM, its
    Python, the first compilations) before the first measured pair, which would otherwise
    pay for it alone."""
    config = base.replace("topics", spans=topic, credits=f"{name}_credits",
                          dead_letter=f"{name}_dlq", late=f"{name}_late",
                          conversions=f"{name}_conversions",
                          accounting=f"{name}_accounting") \
        .replace("input", group_id=f"bench-{name}")
    return job_seconds(config, bootstrap, name)


def time_on_data(label: str, empty: Callable[[int], float],
                 full: Callable[[int], float]) -> float | None:
    """Seconds on the data: a run on the data (`full(attempt)`) less the start-up run before
    it (`empty(attempt)`); a pair whose start-up run is the longer is void and measured
    again, up to ATTEMPTS times (None: not measured)."""
    for attempt in range(ATTEMPTS):
        empty_s = empty(attempt)
        full_s = full(attempt)
        if full_s > empty_s:
            return full_s - empty_s
        again = "measuring again" if attempt + 1 < ATTEMPTS else \
            f"NOT MEASURED after {ATTEMPTS} tries"
        print(f"  {label}: VOID: the start-up run (empty topic) took {empty_s:.2f} s, "
              f"longer than the run on the data ({full_s:.2f} s); {again}", flush=True)
    return None


def measure(run: Run, base, bootstrap: str, spans: int, where: StandaloneFlink | None,
            name: str) -> Run:
    """One run of `run`'s shape, publishing and mode, its figures filled in."""
    config = base.replace("flink", parallelism=run.parallelism,
                          user_buckets=run.buckets or max(base.flink.user_buckets,
                                                          run.parallelism))

    def shaped(topic: str, name: str):
        return config.replace("topics", spans=topic, credits=f"{name}_credits",
                              dead_letter=f"{name}_dlq", late=f"{name}_late",
                              conversions=f"{name}_conversions",
                              accounting=f"{name}_accounting") \
            .replace("input", group_id=f"bench-{name}")

    def named(attempt: int) -> str:
        return name if attempt == 0 else f"{name}_a{attempt}"

    cpu: dict[str, float | None] = {}  # of the last pair: "empty", "full"

    def cpu_of(kind: str, call: Callable[[], float]) -> float:
        # no in-process Flink yet (no warm-up run): its start-up would count as the run's
        before = flink_cpu_s() if where is None else None
        seconds = call()
        after = flink_cpu_s() if before is not None else None
        cpu[kind] = None if before is None or after is None else after - before
        return seconds

    def empty(attempt: int) -> float:
        return cpu_of("empty", lambda: job_seconds(
            shaped(f"bench_empty_{run.partitions}", named(attempt) + "_e"), bootstrap,
            named(attempt) + "_e", where))

    def full(attempt: int) -> float:
        at = named(attempt)
        spans_topic = f"bench_spans_{run.partitions}_{run.publish}"
        with CheckpointWatcher(Path(base.flink.checkpoint_dir) / at) as state:
            if run.mode == "bounded":
                seconds = cpu_of("full", lambda: job_seconds(shaped(spans_topic, at),
                                                             bootstrap, at, where))
            else:
                seconds = cpu_of("full", lambda: catch_up_seconds(shaped(spans_topic, at),
                                                                  bootstrap, at, where))
        report = final_accounting(bootstrap, f"{at}_accounting")
        run.credit_rows, run.digest = credit_digest(committed_values(bootstrap,
                                                                     f"{at}_credits"))
        if run.attempts and run.digest not in run.attempts:
            print(f"  {label}: the repeated run's credits ({run.digest}) differ from the "
                  f"voided one's ({', '.join(run.attempts)})", flush=True)
        run.attempts.append(run.digest)
        run.corrected = corrected_conversions(committed_values(bootstrap,
                                                               f"{at}_conversions"))
        run.late, run.processed = report.get("late"), report.get("processed")
        run.expired = report.get("expired")
        run.state = state.largest
        return seconds

    label = f"{run.engine} {run.shape} {run.publish} {run.mode}"
    try:
        data_s = time_on_data(label, empty, full)
    except NotCaughtUp as error:
        print(f"  {label}: NOT MEASURED, the job did not catch up: {error}", flush=True)
        return run
    run.rate = spans / data_s if data_s else None
    empty_cpu, full_cpu = cpu.get("empty"), cpu.get("full")
    if data_s and empty_cpu is not None and full_cpu is not None and full_cpu > empty_cpu:
        run.per_cpu = spans / (full_cpu - empty_cpu)
    rate = f"{run.rate:,.0f} spans/s on the data" if run.rate else "not measured"
    if run.per_cpu:
        rate += f", {run.per_cpu:,.0f} per CPU second"
    print(f"  {label}: {rate} (late {run.late}, expired {run.expired}, processed "
          f"{run.processed}, corrected {run.corrected}, credits {run.credit_rows:,} rows "
          f"{run.digest}, state {run.state / 1e6:.0f} MB)", flush=True)
    return run


def _n(count: int | None) -> str:
    return "-" if count is None else f"{count:,}"


def report(runs: list[Run]) -> bool:
    """The table, one row per run, then the medians; whether every run was measured and
    gave the same credits."""
    first = runs[0]
    base_rates = [r.rate for r in runs if r.rate and (r.engine, r.shape, r.publish, r.mode)
                  == (first.engine, first.shape, first.publish, first.mode)]
    baseline = statistics.median(base_rates) if base_rates else None
    base_cpu = [r.per_cpu for r in runs if r.per_cpu and (r.engine, r.shape, r.publish,
                                                          r.mode)
                == (first.engine, first.shape, first.publish, first.mode)]
    cpu_baseline = statistics.median(base_cpu) if base_cpu else None
    print("late, expired (of the late, lost behind the job's state; '-': not counted by "
          "this job): the run accounting's; corrected: conversions written again because late "
          "events changed them (counted on the conversions topic; the run accounting has "
          "no such count)")
    print(f"{'round':>5} {'engine':12}{'shape':>10}{'publish':>9}{'mode':>10}{'late':>7}"
          f"{'expired':>8}{'processed':>11}{'corrected':>10}{'state MB':>9}{'credits':>9}  "
          f"{'digest':12}{'spans/s':>11}{'vs first':>9}{'per CPU s':>11}{'vs first':>9}")
    for r in runs:
        rate = f"{r.rate:,.0f}" if r.rate else "-"
        ratio = f"{r.rate / baseline:.2f}" if r.rate and baseline else "-"
        per_cpu = f"{r.per_cpu:,.0f}" if r.per_cpu else "-"
        cpu_ratio = f"{r.per_cpu / cpu_baseline:.2f}" if r.per_cpu and cpu_baseline else "-"
        print(f"{r.round:>5} {r.engine:12}{r.shape:>10}{r.publish:>9}{r.mode:>10}"
              f"{_n(r.late):>7}{_n(r.expired):>8}{_n(r.processed):>11}{_n(r.corrected):>10}"
              f"{r.state / 1e6:>9.0f}"
              f"{r.credit_rows:>9,}  {r.digest or '-':12}{rate:>11}{ratio:>9}"
              f"{per_cpu:>11}{cpu_ratio:>9}")
    groups: dict[tuple, list[float]] = {}
    cpu_groups: dict[tuple, list[float]] = {}
    for r in runs:
        groups.setdefault((r.engine, r.shape, r.publish, r.mode), []).extend(
            [r.rate] if r.rate else [])
        cpu_groups.setdefault((r.engine, r.shape, r.publish, r.mode), []).extend(
            [r.per_cpu] if r.per_cpu else [])
    if max(r.round for r in runs):
        for key, rates in groups.items():
            engine, shape, publish, mode = key
            median = f"{statistics.median(rates):,.0f} spans/s" if rates else "not measured"
            per_cpu = cpu_groups[key]
            if per_cpu:
                median += f", {statistics.median(per_cpu):,.0f} per CPU second"
            print(f"median {engine} {shape} {publish} {mode}: {median} "
                  f"({len(rates)} measured)")
    ok = True
    unmeasured = [r for r in runs if r.rate is None]
    if unmeasured:
        ok = False
        print(f"NOT MEASURED: {len(unmeasured)} run(s): " + ", ".join(
            f"round {r.round} {r.engine} {r.shape} {r.publish} {r.mode}" for r in unmeasured))
    expired = [r for r in runs if r.expired]
    if expired:
        ok = False
        print(f"EXPIRED events (counted by arrival, lost behind the state) in {len(expired)} "
              "run(s): " + ", ".join(f"round {r.round} {r.engine} {r.shape} {r.publish} "
                                     f"{r.mode}: {r.expired:,}" for r in expired))
    digests = {d for r in runs for d in (r.attempts or [None])}
    if len(digests) == 1 and None not in digests:
        print(f"credits identical in every run: yes ({digests.pop()})")
    else:
        ok = False
        print(f"credits identical in every run: NO ({len(digests - {None})} different "
              "results" + (", some runs gave none" if None in digests else "") + ")")
    return ok
