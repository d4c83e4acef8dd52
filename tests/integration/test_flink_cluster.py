"""The attribution job on a real standalone Flink cluster (a JobManager and two
TaskManagers from PyFlink's distribution scripts, jobs submitted with `flink run`), at
parallelism 2 on a 4-partition topic: a TaskManager killed with SIGKILL mid-stream, and a
stop with savepoint and restart at another parallelism, lose and repeat nothing; the ROI
job stopped with a savepoint mid-stream and resumed equals the backfill."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.codec.events import decode_events
from pipelines.flink.runtime.final_offsets import savepoint_offsets
from pipelines.flink.runtime.standalone import StandaloneFlink
from pipelines.kafka.io import consumer_lag, producer, read_all
from pipelines.settings.job_config import StreamingJobConfig
from pipelines.sources.generator import plan_events
from tests.job_io import (
    assert_reference_credits,
    credit_rows,
    messages,
    publishing_slowly,
    wait_for_credits,
    wait_until_consumed,
)
from tests.roi_inputs import (
    MODELS,
    Inputs,
    conservation_problems,
    cpu_hog,
    final_rows,
    input_values,
    same_rows,
    spend_values,
)
from tests.spans import encoded, plain, stamp_of

PARTITIONS = 4
# Upper bounds on waits: a quiet run needs a tenth of them, a CI machine busy with other
# work (and the tests' own busy loops) much more; a wait that ends early costs nothing.
WAIT_S = 600.0
REFIT_S = 6 * 3600.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    flink = StandaloneFlink(tmp_path_factory.mktemp("flink-cluster"))
    flink.up(task_managers=2, slots=1)
    try:
        yield flink
    finally:
        flink.down()


@pytest.fixture(autouse=True)
def no_job_left_behind(cluster: StandaloneFlink):
    """A test that failed half-way may leave its job running on the shared cluster: it is
    cancelled, so that the next test gets the slots."""
    yield
    cluster.cancel_unfinished()


@pytest.fixture(scope="module")
def telemetry() -> tuple[Any, list[bytes]]:
    plan = plan_events(600, seed=12)
    return plan, encoded(plan)


def streaming_config(job_config: StreamingJobConfig, topic, tmp_path: Path,
                     parallelism: int, idleness_s: float | None = None,
                     ) -> tuple[StreamingJobConfig, Path]:
    config = job_config.replace("topics", spans=topic("spans", PARTITIONS))
    if idleness_s is not None:
        config = config.replace("event_time", idleness_s=idleness_s,
                                backlog_idleness_s=idleness_s)
    config = config.replace("input", bounded=False)
    config = config.replace("flink", parallelism=parallelism, restart_attempts=20,
                            restart_delay_s=2.0)
    config = config.replace("attribution", refit_every_s=REFIT_S)
    return config, write_config(config, tmp_path / f"job-p{parallelism}.yaml")


def write_config(config: StreamingJobConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    return path


def publish(kafka: str, topic: str, values: list[bytes], first: int = 0) -> None:
    raw = producer(kafka)
    for i, value in enumerate(values, start=first):
        raw.send(topic, plain(value), partition=i % PARTITIONS, timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()


def assert_reference_results(kafka: str, config: StreamingJobConfig, plan: Any) -> None:
    assert_reference_credits(kafka, config, plan, REFIT_S)


def drain(cluster: StandaloneFlink, job: str, folder: Path) -> str:
    """A drain stop, as `seedance cluster stop --drain` does it; the savepoint's path."""
    return cluster.stop_with_savepoint(job, folder, drain=True)


def first_half_running(kafka, cluster, config, config_file, values) -> tuple[str, int]:
    """The first half of the stream published and the job running on it, some credits
    committed: (job id, where the second half starts)."""
    half = len(values) // 2
    publish(kafka, config.topics.spans, values[:half])
    job = cluster.submit("attribution", config_file, kafka)
    cluster.wait_for_job(job, ("RUNNING",))
    wait_for_credits(kafka, config.topics.credits, timeout_s=WAIT_S)
    return job, half


def checkpointed(cluster: StandaloneFlink, job: str, count: int,
                 timeout_s: float = WAIT_S) -> None:
    """Until the job has completed `count` checkpoints in all."""
    deadline = time.monotonic() + timeout_s
    while cluster.completed_checkpoints(job) < count:
        assert time.monotonic() < deadline, (
            f"{job}: not {count} checkpoints in {timeout_s:.0f} s; it is "
            f"{cluster.job_state(job)}, last failure: {cluster.failure(job)[:300]}")
        time.sleep(1)


@pytest.mark.parametrize(("seed", "backend"), [(3, "hashmap"), (8, "rocksdb")])
def test_a_taskmanager_killed_at_a_random_point_beside_a_cpu_hog_loses_and_repeats_nothing(
        kafka, cluster, job_config, topic, tmp_path, telemetry, seed, backend):
    """A busy-loop process per core beside the cluster; while the input still arrives, a
    TaskManager chosen at random is killed with SIGKILL at a random moment (a seed per
    run), a replacement starts as a supervisor would start one, and the job restarts from
    its last checkpoint: its committed credits, after a drain, are the batch reference's row
    for row -- none lost, none repeated, none changed. On the heap and on RocksDB with
    incremental checkpoints (flink.state_backend), whose checkpoints hold its files."""
    plan, values = telemetry
    rng = random.Random(seed)
    config, _ = streaming_config(job_config, topic, tmp_path, parallelism=2)
    config = config.replace("flink", state_backend=backend,
                            checkpoint_dir=str(tmp_path / "checkpoints"))
    config_file = write_config(config, tmp_path / f"job-{backend}.yaml")
    with cpu_hog():
        job = cluster.submit("attribution", config_file, kafka)
        cluster.wait_for_job(job, ("RUNNING",))
        publisher = publishing_slowly(kafka, config.topics.spans, values, PARTITIONS)
        time.sleep(rng.uniform(0.5, 9.0))
        cluster.kill_task_manager(rng.randrange(2))  # SIGKILL: no goodbye to the JobManager
        cluster.start_task_manager()
        publisher.join()
        deadline = time.monotonic() + WAIT_S
        while cluster.restarts(job) == 0 and time.monotonic() < deadline:
            time.sleep(1)
        assert cluster.restarts(job) >= 1, "the job never noticed the lost TaskManager"
        cluster.wait_for_job(job, ("RUNNING",))
        ran_on = cluster.state_backend(job)
        checkpointed(cluster, job, cluster.completed_checkpoints(job) + 2)  # running again
        wait_until_consumed(kafka, config, timeout_s=WAIT_S)
        drain(cluster, job, tmp_path / "final")
    assert_reference_results(kafka, config, plan)
    assert ran_on.lower().startswith({"hashmap": "hashmap", "rocksdb": "embeddedrocksdb"}[
        backend]), ran_on


def test_a_drain_after_every_partition_went_idle_commits_what_the_final_watermark_releases(
        kafka, cluster, job_config, topic, tmp_path, telemetry):
    """The whole stream read and committed, then quiet for longer than the idleness, so
    that every partition is idle at the drain. Flink 2.2 drops the final watermark of a
    source whose output is idle; `io.seedance.flink.FinalWatermark`, behind the source,
    emits it. Without it, the journeys the final watermark closes and the last refit
    period were never credited (a fresh-clone run lost every credit of two orders)."""
    plan, values = telemetry
    idleness_s = 1.0
    config, config_file = streaming_config(job_config, topic, tmp_path, parallelism=2,
                                           idleness_s=idleness_s)
    publish(kafka, config.topics.spans, values)
    job = cluster.submit("attribution", config_file, kafka)
    cluster.wait_for_job(job, ("RUNNING",))
    wait_until_consumed(kafka, config, timeout_s=WAIT_S)
    time.sleep(4 * idleness_s)  # past the idleness, with periodic emits between
    drain(cluster, job, tmp_path / "final")
    assert_reference_results(kafka, config, plan)


def plan_read(plan: Any, values: list[bytes], committed: dict[int, int]) -> Any:
    """The plan's events that are in the messages a job read: `values[i]` went to partition
    i % PARTITIONS of a fresh topic, at offset i // PARTITIONS, and the job read each
    partition up to its committed offset."""
    seen: set[tuple[object, ...]] = set()
    for i, value in enumerate(values):
        if i // PARTITIONS < committed.get(i % PARTITIONS, 0):
            decoded = decode_events(value, 4)
            touches, orders = decoded.touches, decoded.orders
            seen.update(("touchpoint", user, int(ts), channel) for user, ts, channel in
                        zip(touches.user_id, touches.ts_ms, touches.channel, strict=True))
            seen.update(("conversion", user, int(ts), order) for user, ts, order in
                        zip(orders.user_id, orders.ts_ms, orders.order_id, strict=True))

    def identity(event: Any) -> tuple[object, ...]:
        what = event.channel if event.kind == "touchpoint" else event.order_id
        return (event.kind, event.user_id, event.ts_ns // 1_000_000, what)

    return dataclasses.replace(plan, events=[e for e in plan.events if identity(e) in seen])


@pytest.mark.parametrize("drain_after_s", [0.0, 4.0])
def test_a_drain_mid_stream_commits_exactly_what_the_events_read_give(
        kafka, cluster, job_config, topic, tmp_path, telemetry, drain_after_s):
    """A drain while the input is still arriving (30 s of it), at two points after the
    first credits are committed: the job ends where its source stands (the offsets in its
    final savepoint), and what it committed
    is the batch reference over exactly the events of the messages it read, row for row,
    shapley and markov included -- nothing the final watermark released is missing,
    nothing of what came after is there."""
    plan, values = telemetry
    config, config_file = streaming_config(job_config, topic, tmp_path, parallelism=2)
    job = cluster.submit("attribution", config_file, kafka)
    cluster.wait_for_job(job, ("RUNNING",))
    stop = threading.Event()  # the rest is never published: the drain is mid-stream
    publisher = publishing_slowly(kafka, config.topics.spans, values, PARTITIONS, pause_s=0.6,
                                  stop=stop)
    try:
        wait_for_credits(kafka, config.topics.credits, timeout_s=WAIT_S)
        time.sleep(drain_after_s)
        savepoint = drain(cluster, job, tmp_path / "final")
    finally:
        stop.set()
        publisher.join()
    read_to = savepoint_offsets(savepoint, [config.topics.spans]).get(
        config.topics.spans, {})
    assert sorted(read_to) == list(range(PARTITIONS))
    read = plan_read(plan, values, read_to)
    assert 0 < len(read.events) < len(plan.events), read_to  # a drain mid-stream
    assert_reference_results(kafka, config, read)


def test_a_savepoint_restores_at_another_parallelism_and_loses_nothing(
        kafka, cluster, job_config, topic, tmp_path, telemetry):
    plan, values = telemetry
    config, config_file = streaming_config(job_config, topic, tmp_path, parallelism=1)
    job, half = first_half_running(kafka, cluster, config, config_file, values)
    savepoint = cluster.stop_with_savepoint(job, tmp_path / "savepoints")

    publish(kafka, config.topics.spans, values[half:], first=half)
    rescaled = write_config(config.replace("flink", parallelism=2),
                            tmp_path / "job-rescaled.yaml")
    job = cluster.submit("attribution", rescaled, kafka, savepoint=savepoint)
    cluster.wait_for_job(job, ("RUNNING",))
    checkpointed(cluster, job, 2)
    wait_until_consumed(kafka, config, timeout_s=WAIT_S)
    drain(cluster, job, tmp_path / "final")
    assert_reference_results(kafka, config, plan)


def test_the_three_jobs_run_on_the_cluster_from_4_partition_topics(
        kafka, flink, cluster, job_config, topic, tmp_path):
    """attribution -> GPU cost -> ROI, each submitted with `flink run` at parallelism 2,
    every input topic of 4 partitions: the ROI of the hand-checked scenario, and the GPU
    costs of a MiniCluster run on one partition."""
    from tests.gpu_telemetry import run_shape, telemetry
    from tests.job_io import latest, send
    from tests.roi_scenario import DAY, SCENARIO

    scenario = encoded(SCENARIO, batch_size=2)
    spans, metrics = topic("spans", PARTITIONS), topic("metrics", PARTITIONS)
    publish(kafka, spans, scenario)
    samples, calls = telemetry()
    publish(kafka, metrics, samples)
    publish(kafka, spans, calls, first=len(scenario))
    config = job_config.replace("topics", spans=spans)
    config = config.replace("attribution", models=("last_click", "linear"))
    config = config.replace("gpu", metrics_topic=metrics, costs_topic=topic("costs"),
                            metrics_dead_letter=topic("metrics-dlq"), nominal_interval_s=10.0,
                            max_gap_s=60.0, link_timeout_s=60.0)
    config = config.replace("flink", parallelism=2)
    config_file = write_config(config, tmp_path / "jobs.yaml")
    for job in ("attribution", "gpu-cost"):
        cluster.wait_for_job(cluster.submit(job, config_file, kafka))
    send(kafka, config.topics.ad_spend, [
        {"platform": "google_ads", "account": "1", "campaign": "display-campaign",
         "day": DAY, "amount": 90.0, "currency": "USD"}])
    cluster.wait_for_job(cluster.submit("roi", config_file, kafka))

    rows = latest(messages(kafka, config.topics.roi))
    credits = credit_rows(kafka, config.topics.credits)
    assert sorted({r["order_id"] for r in credits}) == ["oA", "oB", "oB0"]
    display = rows["roi", "last_click", DAY, "channel", None, "display"]
    assert (display["revenue"], display["ad_spend"]) == pytest.approx((180.0, 90.0))
    costs = sorted(tuple(sorted((k, str(v)) for k, v in json.loads(value).items()))
                   for _, value in read_all(kafka, config.gpu.costs_topic))
    reference, _ = run_shape(kafka, flink, job_config, topic, 1, 1)
    assert costs == reference and len(costs) > 200


def test_the_roi_job_stopped_and_resumed_mid_stream_equals_the_backfill(
        kafka, cluster, job_config, topic, tmp_path):
    """The ROI job over 4-partition topics at parallelism 2, its input unkeyed in any order
    (a later day's credits before an earlier day's, costs before the conversions that
    claim them, spend restated): stopped with a savepoint halfway, resumed from it on the
    rest, then drained. Its final rows are the backfill's, row for row, and tie out. (Before
    the final watermark stopped retiring state and reported at once what came after it, an
    input idle at the drain lost 16 to 26 unallocated compute rows here.)"""
    inputs = Inputs(seed=9)
    roi_topic = topic("roi", PARTITIONS)
    config = job_config.replace(
        "topics", credits=topic("credits", PARTITIONS), conversions=topic("conv", PARTITIONS),
        ad_spend=topic("spend", PARTITIONS), roi=roi_topic)
    config = config.replace("gpu", costs_topic=topic("gpu-costs", PARTITIONS))
    config = config.replace("attribution", models=MODELS)
    config = config.replace("input", bounded=False)
    config = config.replace("flink", parallelism=2, restart_attempts=20, restart_delay_s=2.0)
    config_file = write_config(config, tmp_path / "roi.yaml")
    rng = random.Random(4)
    values = [*input_values(config, inputs, rng, costs_first=True),
              (config.topics.ad_spend, [(None, v) for v in spend_values(inputs)])]

    def send(half: int) -> None:
        out = producer(kafka)
        for name, messages_of_topic in values:
            cut = len(messages_of_topic) // 2
            for key, value in (messages_of_topic[:cut], messages_of_topic[cut:])[half]:
                # spend to one partition, in order: a restatement follows what it restates;
                # a credit's versions by key, in order
                if key is not None:
                    out.send(name, value, key=key)
                else:
                    out.send(name, value, partition=0 if name == config.topics.ad_spend
                             else rng.randrange(PARTITIONS))
        out.flush()
        out.close()

    send(0)
    job = cluster.submit("roi", config_file, kafka)
    cluster.wait_for_job(job, ("RUNNING",))
    deadline = time.monotonic() + WAIT_S
    while not list(read_all(kafka, roi_topic)) and time.monotonic() < deadline:
        time.sleep(1)
    savepoint = cluster.stop_with_savepoint(job, tmp_path / "savepoints")
    send(1)
    job = cluster.submit("roi", config_file, kafka, savepoint=savepoint)
    cluster.wait_for_job(job, ("RUNNING",))
    inputs_of_job = [name for name, _ in values]
    deadline = time.monotonic() + WAIT_S
    while any(consumer_lag(kafka, config.input.group_id + "-roi", name)
              for name in inputs_of_job) and time.monotonic() < deadline:
        time.sleep(1)
    cluster.stop_with_savepoint(job, tmp_path / "final", drain=True)
    got = final_rows(kafka, roi_topic)
    assert same_rows(got, inputs.expected(config)) == []
    assert conservation_problems(inputs, got, "fully_loaded") == []


def test_up_on_a_running_cluster_replaces_a_lost_taskmanager(cluster):
    """`seedance cluster up` on a running cluster counts the TaskManagers that run, not the
    ones it once started, and starts the missing ones."""
    before = cluster.live_task_managers()
    cluster.kill_task_manager(0)
    assert cluster.live_task_managers() == before - 1
    info = cluster.up(task_managers=before, slots=1)
    assert info.task_managers == before == cluster.live_task_managers()
    assert cluster.status()["taskmanager_processes_alive"] == before
