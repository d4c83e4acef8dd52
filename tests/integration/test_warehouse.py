"""The warehouse on both databases (SQLite file, real PostgreSQL server): the same rows, the
same summaries, loads that resume from the offsets stored with the rows, atomic blocks."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3

import psycopg
import pytest

from pipelines.kafka.io import producer
from pipelines.store import summaries
from pipelines.store.loading import TopicLoader
from pipelines.store.sinks import CreditsSink, GpuCostsSink
from pipelines.store.warehouse import DDL, Warehouse, WarehouseError, redacted_url

T0 = 1_788_220_800_000  # 2026-09-01T00:00:00Z
DAY = 86_400_000
S = 1000


def credit(model, order, index, channel, share, revenue, stage, day=0):
    return json.dumps({
        "model": model, "order_id": order, "user_id": f"u-{order}",
        "conversion_ts_ms": T0 + day * DAY + 3_600_000, "touch_index": index,
        "channel": channel, "campaign": f"{channel}-q3", "touch_ts_ms": T0 - index * DAY,
        "credit": share, "revenue": revenue, "currency": "EUR", "stage": stage}).encode()


CREDITS = [
    credit("last_click", "o1", 1, "search", 1.0, 60.0, "new"),
    # a conversion's rows under one model travel in one message (a JSON table or list)
    b"[" + credit("linear", "o1", 0, "email", 0.25, 15.0, "new") + b","
    + credit("linear", "o1", 1, "search", 0.75, 45.0, "new") + b"]",
    credit("last_click", "o2", 0, "social", 1.0, 25.0, "repeat", day=1),
    credit("linear", "o2", 0, "social", 1.0, 25.0, "repeat", day=1),
    credit("last_click", "o3", 0, "(unattributed)", 1.0, 15.5, "unknown", day=2),
    credit("linear", "o3", 0, "(unattributed)", 1.0, 15.5, "unknown", day=2),
]
# (model, order_id, touch_index, conversion_date, channel, credit, revenue, stage)
CREDIT_ROWS = [
    ("last_click", "o1", 1, "2026-09-01", "search", 1.0, 60.0, "new"),
    ("last_click", "o2", 0, "2026-09-02", "social", 1.0, 25.0, "repeat"),
    ("last_click", "o3", 0, "2026-09-03", "(unattributed)", 1.0, 15.5, "unknown"),
    ("linear", "o1", 0, "2026-09-01", "email", 0.25, 15.0, "new"),
    ("linear", "o1", 1, "2026-09-01", "search", 0.75, 45.0, "new"),
    ("linear", "o2", 0, "2026-09-02", "social", 1.0, 25.0, "repeat"),
    ("linear", "o3", 0, "2026-09-03", "(unattributed)", 1.0, 15.5, "unknown"),
]
SELECT_CREDITS = ("SELECT model, order_id, touch_index, conversion_date, channel, credit, "
                  "revenue, stage FROM attribution_credits ORDER BY model, order_id, touch_index")


def gpu_call(gpu, end, trace, span, workload, seconds, usd, interval_usd, known=True):
    return json.dumps({
        "kind": "call", "gpu_uuid": gpu, "interval_end_ms": T0 + end * S,
        "interval_start_ms": T0 + (end - 10) * S, "trace_id": trace, "span_id": span,
        "model": "NVIDIA H100 80GB HBM3", "workload": workload, "pod": f"{workload}-0",
        "namespace": "ml", "user_id": f"user-{trace}", "gpu_seconds": seconds,
        "cost_usd": usd, "interval_cost_usd": interval_usd, "price_known": known}).encode()


def gpu_idle(gpu, end, seconds, usd, interval_usd):
    return json.dumps({
        "kind": "idle", "gpu_uuid": gpu, "interval_end_ms": T0 + end * S,
        "interval_start_ms": T0 + (end - 10) * S, "model": "NVIDIA H100 80GB HBM3",
        "idle_seconds": seconds, "cost_usd": usd, "interval_cost_usd": interval_usd,
        "price_known": True}).encode()


GPU_COSTS = [
    # GPU-A: two intervals of $0.02, shared by two ranker traces and idle time
    gpu_call("GPU-A", 10, "t1", "s1", "ranker", 6.0, 0.012, 0.02),
    gpu_call("GPU-A", 10, "t2", "s2", "ranker", 1.5, 0.003, 0.02),
    gpu_idle("GPU-A", 10, 2.5, 0.005, 0.02),
    gpu_call("GPU-A", 20, "t1", "s3", "ranker", 4.0, 0.008, 0.02),
    gpu_idle("GPU-A", 20, 6.0, 0.012, 0.02),
    # GPU-B: busy all along, priced with the fallback price; GPU-C: idle only
    gpu_call("GPU-B", 10, "t3", "s4", "recsys", 10.0, 0.01, 0.01, known=False),
    gpu_idle("GPU-C", 10, 2.0, 0.004, 0.004),
    json.dumps({"kind": "unobserved", "gpu_uuid": "GPU-C", "until_ms": T0,
                "unobserved_ms": 5}).encode(),  # not a cost row: ignored
]


def approx(value):
    return pytest.approx(value, rel=1e-12, abs=1e-15)


def send(bootstrap: str, topic: str, messages: list[bytes]) -> None:
    out = producer(bootstrap)
    for message in messages:
        out.send(topic, message).get(30)
    out.close()


def test_loading_the_same_messages_twice_gives_the_same_rows(warehouse_url):
    with Warehouse(warehouse_url) as warehouse:
        credits, gpu_costs = CreditsSink(warehouse), GpuCostsSink(warehouse)
        credits.write(CREDITS)
        credits.write(CREDITS)
        assert warehouse.query(SELECT_CREDITS) == CREDIT_ROWS

        # a restated message replaces its row instead of adding one
        credits.write([credit("linear", "o2", 0, "social", 1.0, 27.5, "repeat", 1)])
        assert warehouse.query(
            "SELECT COUNT(*), SUM(revenue) FROM attribution_credits WHERE model = ?",
            ("linear",)) == [(4, 103.0)]
        gpu_costs.write(GPU_COSTS)
        gpu_costs.write(GPU_COSTS)
        assert warehouse.query("SELECT COUNT(*) FROM gpu_call_costs") == [(4,)]
        assert warehouse.query("SELECT gpu_uuid, interval_end_ms FROM gpu_idle_costs "
                               "ORDER BY gpu_uuid, interval_end_ms") == [
            ("GPU-A", T0 + 10 * S), ("GPU-A", T0 + 20 * S), ("GPU-C", T0 + 10 * S)]
    # a second opening finds the tables and rows (the DDL is idempotent)
    with Warehouse(warehouse_url) as again:
        again.apply_ddl(DDL)
        assert again.query("SELECT COUNT(*) FROM attribution_credits") == [(7,)]


def test_a_corrected_conversion_replaces_all_its_rows_under_that_model(warehouse_url):
    """A late touch re-credits o1; a later message has all of o1's linear rows, fewer than
    before: the rows it lacks go, other models' and orders' rows stay."""
    with Warehouse(warehouse_url) as warehouse:
        credits = CreditsSink(warehouse)
        credits.write(CREDITS)
        credits.write([credit("linear", "o1", 0, "search", 1.0, 60.0, "repeat")])
        rows = warehouse.query(SELECT_CREDITS)
    assert [row for row in rows if row[:2] == ("linear", "o1")] == [
        ("linear", "o1", 0, "2026-09-01", "search", 1.0, 60.0, "repeat")]
    assert [row for row in rows if row[:2] != ("linear", "o1")] == [
        row for row in CREDIT_ROWS if row[:2] != ("linear", "o1")]

def test_summaries(warehouse_url):
    with Warehouse(warehouse_url) as warehouse:
        CreditsSink(warehouse).write(CREDITS)
        GpuCostsSink(warehouse).write(GPU_COSTS)
        assert summaries.totals(warehouse) == [("last_click", 3, 3.0, approx(100.5)),
                                               ("linear", 3, 3.0, approx(100.5))]
        assert summaries.channel_summary(warehouse) == [
            ("last_click", "search", 1.0, 60.0), ("last_click", "social", 1.0, 25.0),
            ("last_click", "(unattributed)", 1.0, 15.5),
            ("linear", "search", 0.75, 45.0), ("linear", "social", 1.0, 25.0),
            ("linear", "(unattributed)", 1.0, 15.5), ("linear", "email", 0.25, 15.0)]
        assert summaries.stage_summary(warehouse) == [
            ("last_click", "new", 1, 60.0), ("last_click", "repeat", 1, 25.0),
            ("last_click", "unknown", 1, 15.5), ("linear", "new", 1, approx(60.0)),
            ("linear", "repeat", 1, 25.0), ("linear", "unknown", 1, 15.5)]
        gpu = summaries.gpu_cost_summary(warehouse)
    assert gpu == {
        "per_workload": [("ml", "ranker", 11.5, approx(0.023)), ("ml", "recsys", 10.0, 0.01)],
        "top_traces": [("t1", "user-t1", approx(0.02)), ("t3", "user-t3", 0.01),
                       ("t2", "user-t2", 0.003)],
        "idle_per_gpu": [("GPU-A", "NVIDIA H100 80GB HBM3", 8.5, approx(0.017)),
                         ("GPU-C", "NVIDIA H100 80GB HBM3", 2.0, 0.004)],
        "allocated_usd": approx(0.033),
        "idle_usd": approx(0.021),
        "interval_usd": approx(0.054),  # each interval once: 0.02 + 0.02 + 0.01 + 0.004
        "idle_shared": [("ranker", approx(0.017)), ("(idle)", 0.004)],
        "fallback_priced_rows": 1,
    }
    for key in ("allocated_usd", "idle_usd", "interval_usd"):
        assert type(gpu[key]) is float


def test_empty_warehouse_summaries(warehouse_url):
    with Warehouse(warehouse_url) as warehouse:
        gpu = summaries.gpu_cost_summary(warehouse)
        assert summaries.totals(warehouse) == []
        assert summaries.channel_summary(warehouse) == []
    assert (gpu["allocated_usd"], gpu["idle_usd"], gpu["interval_usd"]) == (0.0, 0.0, 0.0)
    assert gpu["fallback_priced_rows"] == 0 and gpu["idle_shared"] == []


def test_load_from_kafka_resumes_from_the_offsets_stored_with_the_rows(
        warehouse_url, kafka, topic):
    name = topic("credits")
    send(kafka, name, CREDITS[:4])
    with Warehouse(warehouse_url) as warehouse:
        assert TopicLoader(warehouse).load_credits(kafka, name) == 4
        assert TopicLoader(warehouse).load_credits(kafka, name) == 0
    send(kafka, name, CREDITS[4:])
    with Warehouse(warehouse_url) as restarted:
        loader = TopicLoader(restarted)
        assert loader.load_credits(kafka, name) == 2
        assert restarted.query(SELECT_CREDITS) == CREDIT_ROWS
        offsets = "SELECT consumer, topic, partition, next_offset FROM kafka_offsets"
        assert restarted.query(offsets) == [("warehouse-loader", name, 0, 6)]

        # a batch whose write fails leaves neither its rows nor its offsets behind
        restated = [credit("last_click", "o1", 1, "search", 1.0, 70.0, "new"),
                    credit("last_click", "o4", 0, "email", 1.0, 9.0, "new", day=3)]
        send(kafka, name, restated)

        def write_then_fail(batch: list[bytes]) -> None:
            CreditsSink(restarted).write(batch)
            raise RuntimeError("the disk is full")

        with pytest.raises(RuntimeError, match="the disk is full"):
            loader.load(kafka, name, write_then_fail)
        assert restarted.query(offsets) == [("warehouse-loader", name, 0, 6)]
        assert restarted.query(SELECT_CREDITS) == CREDIT_ROWS

        # the next load picks up exactly those two messages
        assert loader.load_credits(kafka, name) == 2
        assert restarted.query(offsets) == [("warehouse-loader", name, 0, 8)]
        assert restarted.query("SELECT COUNT(*), SUM(revenue) FROM attribution_credits "
                               "WHERE model = ?", ("last_click",)) == [(4, 119.5)]
        # another consumer name keeps its own offsets and starts from the beginning
        assert loader.load(kafka, name, CreditsSink(restarted).write,
                           consumer="second-loader") == 8


def test_a_message_the_database_refuses_is_set_aside_and_the_rest_loaded(
        warehouse_url, kafka, topic):
    """A NUL in a text field (PostgreSQL text refuses it), a row missing a field and bytes
    that are no JSON: each set aside in load_rejects with its place and the reason, every
    other message loaded, the offsets past them all; loading again changes nothing."""
    name = topic("credits")
    nul = json.loads(credit("last_click", "o9", 0, "email", 1.0, 5.0, "new"))
    nul["user_id"] = "ctl-\x00-user"
    missing = json.loads(credit("linear", "o9", 0, "email", 1.0, 5.0, "new"))
    del missing["revenue"]
    bad = [json.dumps(nul).encode(), json.dumps(missing).encode(), b"{not json"]
    send(kafka, name, CREDITS[:3] + bad + CREDITS[3:])
    with Warehouse(warehouse_url) as warehouse:
        loader = TopicLoader(warehouse)
        assert loader.load_credits(kafka, name) == 9
        assert warehouse.query(SELECT_CREDITS) == (
            CREDIT_ROWS if warehouse.dialect == "postgresql" else
            # SQLite stores a NUL: only the two others are refused there
            sorted([*CREDIT_ROWS, ("last_click", "o9", 0, "2026-09-01", "email", 1.0, 5.0,
                                   "new")]))
        rejects = warehouse.query("SELECT topic, partition, message_offset, reason, "
                                  "payload_base64 FROM load_rejects ORDER BY message_offset")
        expected = [4, 5] if warehouse.dialect == "sqlite" else [3, 4, 5]
        assert [r[2] for r in rejects] == expected and {r[:2] for r in rejects} == {(name, 0)}
        reasons = [r[3] for r in rejects]
        assert reasons[-2].startswith("KeyError") and "revenue" in reasons[-2]
        assert reasons[-1].startswith("JSONDecodeError")
        if warehouse.dialect == "postgresql":
            assert "NUL" in reasons[0]
        assert base64.b64decode(rejects[-1][4]) == b"{not json"
        assert warehouse.query("SELECT next_offset FROM kafka_offsets") == [(9,)]
        assert loader.load_credits(kafka, name) == 0


def test_a_transaction_that_raises_leaves_nothing_behind(warehouse_url):
    insert_offset = ("INSERT INTO kafka_offsets (consumer, topic, partition, next_offset) "
                     "VALUES (?, ?, ?, ?)")
    counts = ("SELECT (SELECT COUNT(*) FROM attribution_credits), "
              "(SELECT COUNT(*) FROM kafka_offsets)")
    with Warehouse(warehouse_url) as warehouse:
        with pytest.raises(RuntimeError, match="boom"), warehouse.transaction():
            CreditsSink(warehouse).write(CREDITS)
            assert warehouse.execute(insert_offset, ("c", "t", 0, 5)) == 1
            assert warehouse.query(counts) == [(7, 1)]  # visible inside the block
            raise RuntimeError("boom")
        assert warehouse.query(counts) == [(0, 0)]

        # a failing row undoes the rows of the same executemany before it
        with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
            warehouse.executemany(insert_offset, [("c", "t", 0, 1), ("c", "t", 1, 2),
                                                  ("c", "t", 0, 3)])
        assert warehouse.query(counts) == [(0, 0)]

        # an inner block that raises undoes only its own work
        with warehouse.transaction():
            warehouse.execute(insert_offset, ("c", "t", 0, 1))
            with contextlib.suppress(RuntimeError), warehouse.transaction():
                warehouse.execute(insert_offset, ("c", "t", 1, 2))
                raise RuntimeError("inner")
            warehouse.execute(insert_offset, ("c", "t", 2, 3))
        assert warehouse.query("SELECT partition, next_offset FROM kafka_offsets "
                               "ORDER BY partition") == [(0, 1), (2, 3)]

        # statements outside a block commit on their own
        assert warehouse.execute("DELETE FROM kafka_offsets WHERE partition = ?", (0,)) == 1
    with Warehouse(warehouse_url) as reopened:
        assert reopened.query("SELECT partition FROM kafka_offsets") == [(2,)]


def test_placeholders_quotes_and_ddl_files(warehouse_url, tmp_path):
    ddl = tmp_path / "extra.sql"
    ddl.write_text("-- a comment; with a ? and a 100% sign\n"
                   "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT);"
                   "\n/* two; statements */ CREATE INDEX IF NOT EXISTS notes_by_body "
                   "ON notes (body);\n")
    with Warehouse(warehouse_url) as warehouse:
        warehouse.apply_ddl(ddl)
        warehouse.apply_ddl(ddl)  # idempotent
        warehouse.upsert("notes", ("id", "body"), 1, [(1, "it's 100% done?"), (2, "a")])
        warehouse.upsert("notes", ("id",), 1, [(2,)])  # keys only: the row stays as it is
        assert warehouse.query("SELECT body FROM notes WHERE id = ?", (2,)) == [("a",)]
        assert warehouse.query("SELECT id, body FROM notes WHERE body LIKE '%?' AND id = ?",
                               (1,)) == [(1, "it's 100% done?")]
        assert warehouse.query("SELECT COUNT(*) FROM notes WHERE body <> 'it''s ?'") == [(2,)]
        assert warehouse.dialect == warehouse_url.split(":", 1)[0]


def test_a_loader_that_may_not_create_tables_uses_the_existing_ones(postgres):
    admin = psycopg.connect(postgres, autocommit=True)
    admin.execute("CREATE DATABASE restricted")
    restricted = postgres.rsplit("/", 1)[0] + "/restricted"
    as_loader = restricted.replace("//seedance@", "//loader@")
    try:
        admin.execute("CREATE ROLE loader LOGIN")  # PostgreSQL 15+: no CREATE on public
        with pytest.raises(WarehouseError, match="lacks the tables attribution_credits, "
                           "conversions, kafka_offsets, .* and this user may not create them: "
                           "run warehouse.sql there once"):
            Warehouse(as_loader)
        Warehouse(restricted).close()  # the owner creates them
        with psycopg.connect(restricted, autocommit=True) as owner:
            # DELETE too: a corrected conversion's credit rows replace all it had
            owner.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                          "public TO loader")
        with Warehouse(as_loader) as loader:
            CreditsSink(loader).write(CREDITS)
            assert loader.query(SELECT_CREDITS) == CREDIT_ROWS
    finally:
        admin.execute("DROP DATABASE restricted WITH (FORCE)")
        admin.execute("DROP ROLE IF EXISTS loader")
        admin.close()


def test_urls_in_messages_hide_the_password(postgres):
    assert redacted_url("postgresql://loader:s3cret@db:5432/wh?sslmode=require") == \
        "postgresql://loader:***@db:5432/wh?sslmode=require"
    assert redacted_url("postgresql://db/wh?user=loader&password=s3cret") == \
        "postgresql://db/wh?user=loader&password=***"
    assert redacted_url("sqlite:////var/lib/wh.db") == "sqlite:////var/lib/wh.db"
    assert redacted_url("postgresql:///wh?password=s3cret") == "postgresql:///wh?password=***"
    host = postgres.split("@", 1)[1].rsplit("/", 1)[0]
    with pytest.raises(WarehouseError) as error:
        Warehouse(f"postgresql://seedance:s3cret@{host}/no_such_database")
    message = str(error.value)
    assert "s3cret" not in message
    assert f"postgresql://seedance:***@{host}/no_such_database" in message
    assert 'database "no_such_database" does not exist' in message
    with pytest.raises(ValueError, match="unsupported warehouse URL 'mysql://u:\\*\\*\\*@h/d'"):
        Warehouse("mysql://u:s3cret@h/d")
