"""Live latency of the attribution job: telemetry stamped with the current time published
at a steady rate into an unbounded job; p50/p99 of the time from an order's event time to
its first credits being readable with read_committed (`bench/streaming.py --latency-s`)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from kafka import KafkaConsumer

from pipelines.codec import credit_messages
from pipelines.kafka.io import ensure_topics, read_all
from pipelines.sources.generator import LATE_RANK, SpanEmitter, plan_events
from pipelines.sources.kafka_exporter import KafkaSpanExporter


class CreditWatcher(threading.Thread):
    """Reads the credits topic (read_committed) and notes when each order first shows up."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.first_seen: dict[str, tuple[float, int]] = {}  # order -> (wall s, event ms)
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                 isolation_level="read_committed", auto_offset_reset="earliest",
                                 enable_auto_commit=False, group_id=None)
        while not self.stop.is_set():
            for records in consumer.poll(timeout_ms=100).values():
                now = time.time()
                for record in records:
                    for row in credit_messages.decode(record.value):
                        self.first_seen.setdefault(row["order_id"],
                                                   (now, row["conversion_ts_ms"]))
        consumer.close()


def live_latency(bootstrap: str, home: Path, seconds: float, rate: float, lateness_s: float,
                 checkpoint_s: float) -> None:
    """Publish live telemetry at `rate` spans/s into an unbounded job; print p50/p99."""
    topics = {name: f"live_{name}" for name in ("spans", "credits", "dead_letter", "late",
                                                "conversions", "accounting")}
    ensure_topics(bootstrap, list(topics.values()))
    config = home / "live.yaml"
    config.write_text(
        "topics:\n" + "".join(f"  {k}: {v}\n" for k, v in topics.items())
        + f"input:\n  group_id: live-bench\n  starting_offsets: earliest\n"
        f"event_time:\n  max_out_of_orderness_s: {lateness_s}\n  idleness_s: 1\n"
        f"flink:\n  checkpoint_interval_s: {checkpoint_s}\n  checkpoint_dir: {home}/live-chk\n"
        f"  resume: false\n  accounting_every_s: 1\n")
    log = (home / "live-job.log").open("w")
    job = subprocess.Popen([sys.executable, "-m", "jobs.cli", "run", "--config", str(config),
                            "--bootstrap", bootstrap], stdout=log, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, start_new_session=True,
                           env={**os.environ, "SEEDANCE_HOME": str(home)})
    watcher = CreditWatcher(bootstrap, topics["credits"])
    watcher.start()
    try:
        emitter = SpanEmitter(KafkaSpanExporter(bootstrap, topics["spans"]), seed=3)
        # the plan gives realistic journeys; their times are replaced by the wall clock
        plan = [e for e in plan_events(max(1000, int(rate * seconds / 5)), seed=3).events
                if e.emit_rank < LATE_RANK]
        plan.sort(key=lambda e: e.ts_ns)
        warm = emitter.event(replace(plan[0], ts_ns=time.time_ns()))
        emitter.flush()
        deadline = time.monotonic() + 180
        while not any(json.loads(v).get("records_in", 0) >= warm
                      for _, v in read_all(bootstrap, topics["accounting"])):
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError(f"the job did not start; see {log.name}")
            time.sleep(1)
        print(f"job running; publishing at {rate:,.0f} spans/s for {seconds:.0f} s ...",
              flush=True)
        tick, position, sent, started = 0.1, 1, 0, time.monotonic()
        while time.monotonic() - started < seconds and position < len(plan):
            # about 1.7 spans per event: an order brings a child span, some touches a GPU call
            take = max(1, int(rate * tick / 1.7))
            now = time.time_ns()
            for i, event in enumerate(plan[position:position + take]):
                sent += emitter.event(replace(event, ts_ns=now + i))
            emitter.flush()
            position += take
            behind = started + (sent / rate) - time.monotonic()
            if behind > 0:
                time.sleep(behind)
        offered = sent / (time.monotonic() - started)
        emitter.close()
        time.sleep(lateness_s + 3 * checkpoint_s + 5)  # the last orders' credits
    finally:
        watcher.stop.set()
        watcher.join(10)
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
    lags = sorted(seen - event_ms / 1000 for seen, event_ms in watcher.first_seen.values())
    if len(lags) < 2:
        print(f"no credits seen; see {log.name}")
        return
    p50 = statistics.median(lags)
    p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
    print(f"live: {sent:,} spans at {offered:,.0f} spans/s offered; {len(lags):,} orders "
          f"credited; event time -> credits readable (read_committed): p50 {p50:.2f} s, "
          f"p99 {p99:.2f} s (allowed out-of-orderness {lateness_s:g} s, checkpoints every "
          f"{checkpoint_s:g} s)")
