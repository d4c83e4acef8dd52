"""Kill the streaming job mid-stream (SIGKILL, no goodbye), start it again: it resumes from
its last checkpoint, and the result topic read with read_committed holds every credit of
an uninterrupted run exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.codec import credit_messages, table_messages
from pipelines.kafka.io import read_all
from pipelines.sources.generator import Plan, PlannedEvent, emit, plan_events
from pipelines.sources.kafka_exporter import KafkaSpanExporter
from tests.reference import reference_credits

DAY_NS = 86_400 * 10**9


def expected_credits(plan: Plan) -> set[tuple[str, str, int]]:
    return {(c.model, c.order_id, c.touch_index) for c in reference_credits(plan)}


def start_job(config: Path, kafka: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "run", "--config", str(config),
                             "--bootstrap", kafka], env=env, stdout=log.open("a"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # the Python client and its Flink JVM
    process.wait(30)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def publish(kafka: str, topic: str, events: list[PlannedEvent]) -> int:
    exporter = KafkaSpanExporter(kafka, topic)
    return emit(Plan(events=events), exporter, lambda _: None, batch_size=200)


def test_sigkill_and_restart_loses_nothing_and_duplicates_nothing(kafka, topic, tmp_path):
    spans, credits, conversions = topic("spans"), topic("credits"), topic("conversions")
    accounting = topic("accounting")
    checkpoints = tmp_path / "checkpoints"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"topics:\n  spans: {spans}\n  credits: {credits}\n  dead_letter: {topic('dlq')}\n"
        f"  late: {topic('late')}\n  conversions: {conversions}\n  accounting: {accounting}\n"
        f"input:\n  group_id: eo-{spans}\n  starting_offsets: committed\n"
        f"flink:\n  checkpoint_interval_s: 1\n  checkpoint_dir: {checkpoints}\n"
        f"  accounting_every_s: 1\n")
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path)}
    log = tmp_path / "job.log"
    plan = plan_events(300, seed=5, late_fraction=0.0, malformed_messages=0)
    half = len(plan.events) // 2
    # a last touch a day after everything else moves the watermark past every real event
    newest = max(e.ts_ns for e in plan.events)
    sentinel = PlannedEvent("touchpoint", "zz-sentinel", newest + DAY_NS, "email", "",
                            emit_rank=float(newest + DAY_NS))
    expected = expected_credits(plan)

    def committed() -> list[dict]:
        return [row for _, v in read_all(kafka, credits) for row in credit_messages.decode(v)]

    published = publish(kafka, spans, plan.events[:half])
    first = start_job(config, kafka, env, log)
    try:
        wait_for(lambda: len(committed()) > 0 and any(checkpoints.glob("*/*/chk-*/_metadata")),
                 120, "a checkpoint with committed credits")
        published += publish(kafka, spans, plan.events[half:half + half // 2])
        time.sleep(1.5)  # let it work on the new data, then kill it mid-stream
    finally:
        kill(first)
    before_restart = len(committed())
    published += publish(kafka, spans, [*plan.events[half + half // 2:], sentinel])

    def counted() -> dict:
        rows = [json.loads(v) for _, v in read_all(kafka, accounting)]
        return rows[-1] if rows else {}

    second = start_job(config, kafka, env, log)
    try:
        wait_for(lambda: len(committed()) >= len(expected), 180, "all credits after restart")
        wait_for(lambda: counted().get("records_in") == published, 60, "every span counted")
        time.sleep(3)  # any duplicate would surface in the next checkpoints
        rows = committed()
        report = counted()
        orders = [row["order_id"] for _, v in read_all(kafka, conversions)
                  for row in table_messages.decode(v)]
    finally:
        kill(second)
    keys = [(r["model"], r["order_id"], r["touch_index"]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicates after the restart"
    assert set(keys) == expected, "missing or unexpected credits"
    assert sorted(orders) == sorted({order for _, order, _ in expected})  # each order once
    # the counts survive the kill too: restored with the state, not counted twice
    assert report["records_in"] == published and report["late"] == 0
    assert report["processed"] + report["other"] + report["dead_lettered"] == published
    assert 0 < before_restart < len(expected)
    assert "Resuming from checkpoint" in log.read_text()


def test_a_checkpoint_that_cannot_be_restored_is_named_with_the_way_out(kafka, topic, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    broken = checkpoints / "seedance-attribution" / ("0" * 32) / "chk-7"
    broken.mkdir(parents=True)
    (broken / "_metadata").write_bytes(b"not a checkpoint")
    config = tmp_path / "job.yaml"
    config.write_text(f"topics:\n  spans: {topic('spans')}\ninput:\n  bounded: true\n"
                      f"flink:\n  checkpoint_dir: {checkpoints}\n")
    result = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "--config", str(config),
                             "--bootstrap", kafka], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "SEEDANCE_HOME": str(tmp_path)})
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"after resuming from {broken}" in result.stderr
    assert "flink.resume: false" in result.stderr
