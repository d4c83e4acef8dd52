"""The raw archive's pure parts: records by kind and day, exactly-once batches, reads by time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from pipelines.backfill.archive import SCHEMAS, Archive, read_kind, tables_by_date, write_tables
from schemas.records import Conversion, GpuCall, Touchpoint
from tests.spans import make_spans
from udfs.journeys.arrival import NO_ARRIVAL
from udfs.periods import day_of

T0 = int(datetime(2026, 10, 1, 23, 0, tzinfo=UTC).timestamp() * 1000)
H = 3_600_000
ARRIVED = T0 + 5 * H  # the Kafka timestamp of the test messages


def touch_message(user: str, ts_ms: int, channel: str = "email") -> bytes:
    """One OTLP message holding one touchpoint span, as the spans topic carries it."""
    spans = make_spans([("GET /landing", {"user.id": user, "marketing.channel": channel},
                         ts_ms * 1_000_000)])
    return encode_spans(spans).SerializeToString()


def test_day_of_is_the_utc_day():
    assert day_of(T0) == "2026-10-01"
    assert day_of(T0 + H) == "2026-10-02"
    assert day_of(-1) == "1969-12-31"


def test_records_are_grouped_by_kind_and_event_day():
    tables = tables_by_date([
        Touchpoint("u", T0, "email", "c", "t1", "s1"),
        Touchpoint("u", T0 + 2 * H, "display", "", "t2", "s2"),
        Conversion("u", T0 + 2 * H, "o1", 9.5, "USD", "t3", "s3"),
        GpuCall("t2", "s4", T0 + 2 * H, T0 + 2 * H + 40, "u", "GPU-1", "", "", "ranker"),
    ])
    assert sorted((k, d, t.num_rows) for (k, d), t in tables.items()) == [
        ("conversions", "2026-10-02", 1), ("gpu_calls", "2026-10-02", 1),
        ("touchpoints", "2026-10-01", 1), ("touchpoints", "2026-10-02", 1)]
    assert tables["conversions", "2026-10-02"].to_pylist() == [
        {"user_id": "u", "ts_ms": T0 + 2 * H, "order_id": "o1", "revenue": 9.5,
         "currency": "USD", "trace_id": "t3", "span_id": "s3", "arrival_ms": NO_ARRIVAL}]


def test_a_batch_that_died_before_its_commit_is_removed_and_written_again(tmp_path):
    archive = Archive(tmp_path, "spans")
    first = [(0, 0, touch_message("a", T0), ARRIVED),
             (0, 1, touch_message("b", T0 + 2 * H), ARRIVED)]
    archive.write_batch(first)
    archive.commit({0: 2})
    # the next batch is written, then the process dies before storing its offsets
    archive.write_batch([(0, 2, touch_message("c", T0 + 3 * H), ARRIVED),
                         (0, 3, b"not OTLP", ARRIVED)])
    assert len(read_kind(tmp_path, "touchpoints")) == 3
    assert archive.recover() == {0: 2}
    assert sorted(read_kind(tmp_path, "touchpoints").user_id) == ["a", "b"]
    # read again (from offset 2), possibly in other batches: no duplicates
    stats = archive.write_batch([(0, 2, touch_message("c", T0 + 3 * H), ARRIVED)])
    archive.commit({0: 3})
    stats = archive.write_batch([(0, 3, b"not OTLP", ARRIVED)])
    archive.commit({0: 4})
    assert stats.dead_letters == 1 and stats.files == 0
    assert sorted(read_kind(tmp_path, "touchpoints").user_id) == ["a", "b", "c"]
    assert archive.recover() == {0: 4}


def test_starting_without_offsets_rebuilds_the_topics_files_only(tmp_path):
    Archive(tmp_path, "other").write_batch([(0, 0, touch_message("x", T0), ARRIVED)])
    Archive(tmp_path, "other").commit({0: 1})
    spans = Archive(tmp_path, "spans")
    spans.write_batch([(1, 5, touch_message("a", T0), ARRIVED)])
    assert spans.recover() == {}  # nothing committed: its file goes, the other topic's stays
    assert list(read_kind(tmp_path, "touchpoints").user_id) == ["x"]


def test_a_batch_holds_one_partition(tmp_path):
    with pytest.raises(ValueError, match="one partition"):
        Archive(tmp_path, "spans").write_batch([(0, 0, touch_message("a", T0), ARRIVED),
                                                (1, 0, touch_message("b", T0), ARRIVED)])


def test_reads_are_bounded_by_event_time(tmp_path):
    archive = Archive(tmp_path, "spans")
    archive.write_batch([(0, i, touch_message(f"u{i}", T0 + i * H), ARRIVED) for i in range(4)])
    archive.commit({0: 4})
    assert list(read_kind(tmp_path, "touchpoints", T0 + H, T0 + 2 * H).user_id) == ["u1", "u2"]
    assert len(read_kind(tmp_path, "touchpoints", None, T0)) == 1
    assert read_kind(tmp_path, "conversions").empty  # no such folder yet


def test_each_event_keeps_its_records_timestamp_as_its_arrival(tmp_path):
    archive = Archive(tmp_path, "spans")
    archive.write_batch([(0, 0, touch_message("a", T0), T0 + H),
                         (0, 1, touch_message("b", T0 + H), T0 + 30 * 24 * H),
                         (0, 2, touch_message("c", T0 + 2 * H), -1)])  # a record without one
    archive.commit({0: 3})
    touches = read_kind(tmp_path, "touchpoints").sort_values("user_id")
    assert touches.arrival_ms.tolist() == [T0 + H, T0 + 30 * 24 * H, -1]
    assert str(touches.arrival_ms.dtype) == "int64"
    assert read_kind(tmp_path, "conversions").columns[-1] == "arrival_ms"  # none written yet


def test_files_written_before_arrivals_were_kept_read_as_unknown_arrival(tmp_path):
    """An older archive has no arrival column: its events count, beside newer files."""
    old = tables_by_date([Touchpoint("old", T0, "email", "", "t1", "s1"),
                          Conversion("old", T0 + H, "o1", 5.0, "USD", "t2", "s2")])
    write_tables(tmp_path, {key: table.select(SCHEMAS[key[0]].names)
                            for key, table in old.items()}, "before")
    Archive(tmp_path, "spans").write_batch([(0, 0, touch_message("new", T0), T0 + 2 * H)])
    touches = read_kind(tmp_path, "touchpoints").sort_values("user_id")
    assert touches[["user_id", "arrival_ms"]].values.tolist() == [["new", T0 + 2 * H],
                                                                   ["old", NO_ARRIVAL]]
    assert read_kind(tmp_path, "conversions").arrival_ms.tolist() == [NO_ARRIVAL]
