"""An order sent again — in another message, a later batch, twice in one request, on
another partition — is credited once by the Flink job; every copy is a dead letter with
reason duplicate_order, and the credits topic and the warehouse agree; copies from users in
different buckets too."""

from __future__ import annotations

import math

from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import producer
from pipelines.sources.generator import Plan
from pipelines.store import summaries
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from tests.job_io import T0, S, credit_rows, messages, order, touch
from tests.roi_inputs import cpu_hog
from tests.spans import encoded, plain, stamp_of
from udfs.journeys.book import bucket_of

USERS = 12


def messages_of(events) -> list[bytes]:
    return encoded(Plan(events=list(events)), batch_size=len(events))


def test_an_order_sent_again_is_credited_once(kafka, flink, job_config, topic, tmp_path):
    touches = [touch(f"u{i}", T0 + i * 60 * S, "email") for i in range(USERS)]
    orders = [order(f"u{i}", T0 + i * 60 * S + 30 * S, f"o{i}", 10.0 + i) for i in range(USERS)]
    stream: list[bytes] = []
    for i in range(USERS):
        stream += messages_of([touches[i], orders[i], *([orders[i]] if i == 8 else [])])
        if i in (1, 3):
            stream += messages_of([orders[i]])  # the next message
        if i == 5:
            stream += messages_of([orders[3]])  # a later batch, within the allowed lateness
    spans = topic("spans", 4)
    raw = producer(kafka)
    for i, value in enumerate(stream):
        # copies land on other partitions too
        raw.send(spans, plain(value), partition=i % 4, timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()

    config = job_config.replace("topics", spans=spans).replace("flink", parallelism=2)
    config = config.replace("attribution", models=("last_click", "linear"))
    run_job(config, kafka, env=flink.environment(config))

    rows = credit_rows(kafka, config.topics.credits)
    assert sorted((r["model"], r["order_id"]) for r in rows) == sorted(
        (model, f"o{i}") for model in ("last_click", "linear") for i in range(USERS))
    revenue = {model: sum(r["revenue"] for r in rows if r["model"] == model)
               for model in ("last_click", "linear")}
    assert all(math.isclose(v, sum(10.0 + i for i in range(USERS))) for v in revenue.values())
    dead = messages(kafka, config.topics.dead_letter)
    assert sorted(d["reason"] for d in dead) == ["duplicate_order"] * 4
    (report,) = [r for r in messages(kafka, config.topics.accounting) if r["final"]]
    assert report["duplicate_orders"] == 4 and report["processed"] == 2 * USERS
    conversions = messages(kafka, config.topics.conversions)
    assert sorted(c["order_id"] for c in conversions) == sorted(f"o{i}" for i in range(USERS))

    warehouse = Warehouse(f"sqlite:///{tmp_path / 'wh.db'}")
    TopicLoader(warehouse).load_credits(kafka, config.topics.credits)
    totals = {model: (orders_, revenue_)
              for model, orders_, _, revenue_ in summaries.totals(warehouse)}
    assert {m: (n, round(r, 6)) for m, (n, r) in totals.items()} == {
        m: (USERS, round(v, 6)) for m, v in revenue.items()}
    warehouse.close()


def test_one_order_id_from_users_in_every_bucket_is_credited_once(kafka, flink, job_config,
                                                                  topic):
    """The same order id sent by a user in every user bucket (8 buckets), unkeyed over 4
    partitions at parallelism 2, with a CPU hog beside the job: one conversion row and one
    order's credits, the earliest copy's, on the credits and conversions topics; every
    other copy a dead letter naming its partition and offset."""
    buckets = 8
    users: dict[int, str] = {}
    for n in range(200):
        users.setdefault(bucket_of(f"buyer-{n}", buckets), f"buyer-{n}")
    chosen = [users[b] for b in sorted(users)]
    assert len(chosen) == buckets
    events = []
    for n, user in enumerate(chosen):
        events += [touch(user, T0 + n * S, "email"),
                   order(user, T0 + (60 + n) * S, "shared-order", 80.0)]
    stream = [value for n in range(0, len(events), 2) for value in messages_of(events[n:n + 2])]
    spans = topic("spans", 4)
    raw = producer(kafka)
    for i, value in enumerate(reversed(stream)):  # the earliest copy arrives last
        raw.send(spans, plain(value), partition=i % 4, timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()
    config = job_config.replace("topics", spans=spans).replace(
        "flink", parallelism=2, user_buckets=buckets)
    config = config.replace("attribution", models=("last_click",))
    with cpu_hog():  # a busy-loop process per core beside the job: the rule is event time's
        run_job(config, kafka, env=flink.environment(config))
    rows = credit_rows(kafka, config.topics.credits)
    assert [(r["order_id"], r["user_id"], r["revenue"]) for r in rows] == [
        ("shared-order", chosen[0], 80.0)]
    conversions = messages(kafka, config.topics.conversions)
    assert [(c["order_id"], c["user_id"]) for c in conversions] == [("shared-order", chosen[0])]
    dead = messages(kafka, config.topics.dead_letter)
    assert sorted(d["reason"] for d in dead) == ["duplicate_order"] * (buckets - 1)
    # each names the record its copy came in
    assert all(d["partition"] in range(4) and d["offset"] >= 0 for d in dead), dead
