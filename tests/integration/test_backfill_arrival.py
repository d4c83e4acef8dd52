"""Which events count is decided by arrival in batch too: spans published with record
timestamps (CreateTime), some more than `journey.correction_days` after their event time.
The Spark backfill (from `seedance archive`'s Parquet and straight from Kafka), the pandas
engine and `seedance attribute` with the arrival column leave out exactly those events:
their rows equal the rows of the other events alone. One local[2] Spark session."""

from __future__ import annotations

import csv
import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from jobs.backfill import BackfillRequest, run
from jobs.cli import main
from pipelines.backfill.archive import archive_topic, read_kind, tables_by_date, write_tables
from pipelines.backfill.config import BackfillConfig
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics, producer
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.sources.generator import PlannedEvent, plan_events
from pipelines.store.warehouse import Warehouse
from schemas import telemetry as attr
from schemas.records import Conversion, Touchpoint
from tests.spans import make_spans
from udfs.periods import DAY_MS, day_of

FIRST, LAST = "2026-10-20", "2026-10-25"  # the plan runs 2026-10-01 .. 2026-11-14
DAYS = {f"2026-10-{d}" for d in range(20, 26)}
HORIZON_DAYS = 2.0
HORIZON_MS = int(HORIZON_DAYS * DAY_MS)
# record timestamps as a sample's: the producer's, kept however old (no time-based deletion)
CREDIT_QUERY = ("SELECT model, order_id, touch_index, user_id, conversion_ts_ms, channel, "
                "campaign, touch_ts_ms, credit, revenue, stage FROM attribution_credits")
_ids = itertools.count()


@dataclass
class Published:
    config: StreamingJobConfig
    archive: Path  # `seedance archive` of the topic
    in_time: Path  # an archive of the events that arrived in time alone, no arrivals kept
    events: list[PlannedEvent]
    arrivals: list[int]  # each event's record timestamp (ms)

    def late(self, event: int) -> bool:
        return self.arrivals[event] - self.events[event].ts_ns // 10**6 > HORIZON_MS


def record_of(e: PlannedEvent, i: int) -> Touchpoint | Conversion:
    ms = e.ts_ns // 10**6
    if e.kind == "touchpoint":
        return Touchpoint(e.user_id, ms, e.channel, e.campaign, f"t{i}", "")
    return Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency, f"t{i}", "")


def span_spec(e: PlannedEvent) -> tuple[str, dict[str, object], int]:
    if e.kind == "touchpoint":
        attributes: dict[str, object] = {attr.USER_ID: e.user_id, attr.CHANNEL: e.channel}
        if e.campaign:
            attributes[attr.CAMPAIGN] = e.campaign
        return "GET /landing", attributes, e.ts_ns
    return "POST /checkout", {attr.USER_ID: e.user_id, attr.ORDER_ID: e.order_id,
                              attr.ORDER_REVENUE: e.revenue,
                              attr.ORDER_CURRENCY: e.currency}, e.ts_ns


@pytest.fixture(scope="module")
def published(kafka, tmp_path_factory) -> Published:
    home = tmp_path_factory.mktemp("arrival")
    topic = f"arrival-spans-{next(_ids)}"
    ensure_topics(kafka, [topic], partitions=2, config=SAMPLE_SPANS_TOPIC)
    plan = plan_events(150, seed=17, late_fraction=0.0, malformed_messages=0)
    events = [e for e in plan.events if e.kind in ("touchpoint", "conversion")]
    rng = random.Random(9)
    arrivals = []
    for i, e in enumerate(events):
        ms = e.ts_ns // 10**6
        if i % 40 == 0:
            arrivals.append(ms + HORIZON_MS)  # at the horizon exactly: counts
        elif rng.random() < 0.08:  # more than the horizon late, by up to three days
            arrivals.append(ms + HORIZON_MS + rng.randint(1, 3 * DAY_MS))
        else:
            arrivals.append(ms + rng.randint(0, 6 * 3_600_000))
    out = producer(kafka)
    for e, span, arrival in zip(events, make_spans([span_spec(e) for e in events]), arrivals,
                                strict=True):  # one span a message, stamped with its arrival
        out.send(topic, encode_spans([span]).SerializeToString(), key=e.user_id.encode(),
                 timestamp_ms=arrival)
    out.flush()
    out.close()
    archive_topic(kafka, topic, home / "archive", batch_messages=200)
    result = Published(load_config().replace("topics", spans=topic)
                       .replace("journey", correction_days=HORIZON_DAYS)
                       .replace("attribution", refit_every_s=86_400.0),
                       home / "archive", home / "in_time", events, arrivals)
    write_tables(result.in_time, tables_by_date(
        [record_of(e, i) for i, e in enumerate(events) if not result.late(i)]), "in_time")
    late = [e for i, e in enumerate(events) if result.late(i)]
    # late events where they change the credits of the days: orders on them, touches before
    assert any(e.kind == "conversion" and day_of(e.ts_ns // 10**6) in DAYS for e in late)
    assert sum(e.kind == "touchpoint" and FIRST <= day_of(e.ts_ns // 10**6) <= LAST
               for e in late) > 5
    return result


def credits_of(url: str) -> dict[tuple, tuple]:
    with Warehouse(url) as warehouse:
        rows = warehouse.query(CREDIT_QUERY)
    return {row[:3]: row for row in rows}


def assert_same_credits(got: dict[tuple, tuple], want: dict[tuple, tuple]) -> None:
    assert got.keys() == want.keys() and got
    for key, row in got.items():
        assert row[3:8] == want[key][3:8] and row[10] == want[key][10], key
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                   for a, b in zip(row[8:10], want[key][8:10], strict=True)), key


def backfill(published: Published, tmp_path: Path, name: str, archive: Path,
             config: StreamingJobConfig, spark: object = None, kafka: str = "",
             **changes: str) -> dict[tuple, tuple]:
    url = f"sqlite:///{tmp_path / name}.db"
    settings = BackfillConfig(work_dir=str(tmp_path / f"work-{name}")) \
        .replace("archive", path=str(archive)).replace(**changes)
    run(BackfillRequest(FIRST, LAST, settings, config.replace("warehouse", url=url),
                        bootstrap=kafka), progress=print, spark=spark)
    return credits_of(url)


def test_the_archive_keeps_each_events_record_timestamp(published):
    stamped = {(e.user_id, e.ts_ns // 10**6): arrival
               for e, arrival in zip(published.events, published.arrivals, strict=True)}
    for kind in ("touchpoints", "conversions"):
        rows = read_kind(published.archive, kind)
        assert len(rows) and all(stamped[user, ts] == arrival for user, ts, arrival
                                 in zip(rows.user_id, rows.ts_ms, rows.arrival_ms, strict=True))


@pytest.mark.parametrize(("engine", "source", "models"), [
    ("spark", "archive", None),
    ("spark", "kafka", None),  # every model: the topic from its earliest offset
    ("spark", "kafka", ("first_click", "linear")),  # read from a record timestamp on
    ("pandas", "archive", None),
])
def test_the_backfill_leaves_out_exactly_the_events_that_arrived_late(
        published, spark, kafka, tmp_path, engine, source, models):
    config = published.config
    if models:
        config = config.replace("attribution", models=models)
    want = backfill(published, tmp_path, "in_time", published.in_time, config, engine="pandas")
    got = backfill(published, tmp_path, "got", published.archive, config,
                   spark if engine == "spark" else None, kafka, engine=engine, source=source)
    assert_same_credits(got, want)
    # the late events would have changed the rows: without the horizon they count
    every = backfill(published, tmp_path, "every", published.archive,
                     config.replace("journey", correction_days=0.0), engine="pandas")
    assert every.keys() != want.keys()


def write_events(published: Published, path: Path, arrival: bool) -> None:
    """The events as `seedance attribute` reads them: with their arrival, or only those
    that arrived in time and no arrival column."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["user_id", "timestamp", "channel", "campaign", "event_type",
                         "revenue", "order_id", *(["arrival"] if arrival else [])])
        for i, e in enumerate(published.events):
            if not arrival and published.late(i):
                continue
            touch = e.kind == "touchpoint"
            writer.writerow([e.user_id, e.ts_ns // 10**6, e.channel if touch else "",
                             e.campaign if touch else "", "touch" if touch else "conversion",
                             "" if touch else repr(e.revenue), "" if touch else e.order_id,
                             *([published.arrivals[i]] if arrival else [])])


def test_seedance_attribute_with_the_arrival_column_leaves_out_the_same_events(
        published, tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(f"journey:\n  correction_days: {HORIZON_DAYS}\n"
                   "attribution:\n  refit_every_s: 86400\n")
    assert load_config(job).computation == published.config.computation
    credits = {}
    for arrival in (True, False):
        events = tmp_path / f"events-{arrival}.csv"
        write_events(published, events, arrival)
        credits[arrival] = tmp_path / f"credits-{arrival}.csv"
        assert main(["attribute", "--config", str(job), "--input", str(events),
                     "--out", str(tmp_path / "summary.csv"),
                     "--credits", str(credits[arrival])]) == 0
    late = sum(published.late(i) for i in range(len(published.events)))
    assert f"{late:,} events reached Kafka more than" in capsys.readouterr().out
    stamped, in_time = (pd.read_csv(credits[a], keep_default_na=False) for a in (True, False))
    pd.testing.assert_frame_equal(stamped, in_time)
    # and they are the backfill's rows of the days
    want = backfill(published, tmp_path, "in_time", published.in_time, published.config,
                    engine="pandas")
    days = stamped[stamped.day.isin(DAYS)]
    got = {(r.model, r.order_id, r.touch_index): (
        r.model, r.order_id, r.touch_index, r.user_id, r.conversion_ts_ms, r.channel,
        r.campaign, r.touch_ts_ms, r.credit, r.revenue, r.stage) for r in days.itertuples()}
    assert_same_credits(got, want)
