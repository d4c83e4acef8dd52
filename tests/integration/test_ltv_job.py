"""The LTV job on Flink: conversions (240 customers, repeat orders over 75 days, some
orders reported again with another amount and time) on 3 partitions at parallelism 2, a
model fitted on them and published to the compacted ltv_models topic. Each customer's
latest customer_ltv row equals the batch computation (udfs.ltv.model over the same orders, with
the same model and segment bounds, as of the row's day) to 1e-9; the loader keeps it. A
live job keeps only tallies until its first model comes, sets a malformed model aside in
the dead letters and scores everything after the model."""

from __future__ import annotations

import json
import math
import random
import time
import uuid

import numpy as np
import pytest

from pipelines.codec import table_messages
from pipelines.flink.jobs import COMPACTED, LTV
from pipelines.flink.ltv.job import build_ltv_pipeline, run_ltv_job
from pipelines.kafka.io import consumer_lag, ensure_topics, producer, read_all, topic_setting
from pipelines.ltv.models_topic import ModelMessage, latest_model, publish_model
from pipelines.store.loading import TopicLoader
from pipelines.store.warehouse import Warehouse
from schemas import rows
from tests.job_io import drain, messages
from udfs.journeys.book import bucket_of
from udfs.ltv.model import fit_model, summaries_from_transactions
from udfs.ltv.tally import customer_scores
from udfs.periods import DAY_MS

T0 = 20_300 * DAY_MS  # 2025-07-31
DAYS = 75
WAIT_S = 600  # a busy machine: the upper bound of every wait
SCORES = ("frequency", "recency_days", "age_days", "monetary", "p_alive",
          "expected_purchases", "expected_order_value", "predicted_ltv")


def customers_orders(users: int = 240, seed: int = 11) -> list[tuple[str, str, int, float]]:
    """Orders of a BG/NBD-like population: each customer buys at its own rate (about
    weekly on average) from a first day in the first 45, and drops out after a purchase
    with its own probability; a few buy twice on one day."""
    rng = random.Random(seed)
    orders = []
    for u in range(users):
        user = f"customer-{u:04d}"
        rate = rng.gammavariate(2.0, 1 / 14)  # purchases a day
        dropout = rng.betavariate(1.0, 4.0)
        spend = rng.gammavariate(4.0, 10.0)
        at = rng.uniform(0, 45) * DAY_MS
        while at < DAYS * DAY_MS:
            for _ in range(1 + (rng.random() < 0.05)):
                orders.append((f"order-{len(orders):05d}", user, T0 + int(at),
                               round(rng.gammavariate(6.0, spend / 6.0), 2)))
            if rng.random() < dropout:
                break
            at += rng.expovariate(rate) * DAY_MS
    return orders


def corrected(orders: list, seed: int = 5) -> list:
    """Later versions of some orders (the attribution job reports a conversion again when
    late data changes it): another amount and a time up to a day away."""
    rng = random.Random(seed)
    return [(order, user, ts + rng.randrange(-DAY_MS // 2, DAY_MS // 2), round(amount * 1.5, 2))
            for order, user, ts, amount in rng.sample(orders, 25)]


def publish_conversions(kafka: str, topic: str, orders: list, corrections: list,
                        buckets: int) -> None:
    """As the attribution job writes them: per half day of event time, one table of
    conversion rows per user bucket, keyed [bucket]; a correction two days after its
    order."""
    versions = sorted([(ts, row) for row in orders for ts in [row[2]]]
                      + [(ts + 2 * DAY_MS, row) for row in corrections for ts in [row[2]]],
                      key=lambda item: item[0])
    out = producer(kafka)
    step = DAY_MS // 2
    by_window: dict[tuple[int, int], list] = {}
    for at, (order, user, ts, amount) in versions:
        by_window.setdefault((at // step, bucket_of(user, buckets)), []).append(
            (order, user, ts, amount, "USD", "repeat", 1, [f"{int(order[6:]):032x}"]))
    for (_, bucket), found in sorted(by_window.items()):
        out.send(topic, table_messages.encode_bytes(rows.CONVERSION, found),
                 key=json.dumps([bucket]).encode())
    out.flush()
    out.close()


def fitted_message(orders: list) -> ModelMessage:
    """What whoever fits publishes: the models fitted on every customer as of the last
    day, and segment bounds from their predicted LTV."""
    end = (T0 // DAY_MS) + DAYS
    _, summaries = summaries_from_transactions(
        np.array([o[1] for o in orders], dtype=object), np.array([o[2] for o in orders]) /
        DAY_MS, np.array([o[3] for o in orders]), end, 7.0)
    return ModelMessage.fitted(fit_model(summaries, 7.0, end), summaries, 365)


def latest_rows(kafka: str, topic: str) -> dict[str, dict]:
    """customer_ltv as its readers take it: the latest row per key (the key is the user)."""
    latest = {}
    for key, value in read_all(kafka, topic):
        (row,) = table_messages.decode(value)
        assert json.loads(key) == [row["user_id"]]
        latest[row["user_id"]] = row
    return latest


def assert_batch_equal(latest: dict, final: list, message: ModelMessage) -> None:
    """Each row against udfs over all the orders (in another order) as of its day."""
    shuffled = final[:]
    random.Random(1).shuffle(shuffled)
    customer = np.array([o[1] for o in shuffled], dtype=object)
    day = np.array([o[2] for o in shuffled], dtype=np.float64) / DAY_MS
    amount = np.array([o[3] for o in shuffled])
    for as_of in sorted({row["as_of_day"] for row in latest.values()}):
        end = int(np.datetime64(as_of, "D").astype(np.int64))
        ids, summaries = summaries_from_transactions(customer, day, amount, end, 7.0)
        scores = customer_scores(message.model, ids, summaries, message.horizon_days,
                                 message.discount_rate, message.bounds, message.names)
        at = {user: i for i, user in enumerate(ids.tolist())}
        for row in (r for r in latest.values() if r["as_of_day"] == as_of):
            i = at[row["user_id"]]
            for name in SCORES:
                assert math.isclose(row[name], float(scores[name][i]), rel_tol=1e-9,
                                    abs_tol=1e-12), (row["user_id"], name)
            assert row["segment"] == scores["segment"][i]
            assert (row["horizon_days"], row["fitted_through_day"]) == (
                365, str(np.datetime64(int(message.version), "D")))


def ltv_topics(job_config, topic, parallelism: int = 2):
    config = job_config.replace("topics", conversions=topic("conversions", 3),
                                ltv_models=topic("ltv-models", config=COMPACTED),
                                customer_ltv=topic("customer-ltv", 3, COMPACTED),
                                ltv_dead_letter=topic("ltv-dlq"))
    return config.replace("flink", parallelism=parallelism)


def test_every_customer_is_scored_as_the_batch_scores_it(kafka, flink, job_config, topic,
                                                          tmp_path):
    config = ltv_topics(job_config, topic)
    # the models topic made by its first publish, compacted
    config = config.replace("topics", ltv_models=f"ltv-models-{uuid.uuid4().hex[:8]}")
    orders = customers_orders()
    corrections = corrected(orders)
    final = list({o[0]: o for o in [*orders, *corrections]}.values())
    message = fitted_message(final)
    publish_model(kafka, config.topics.ltv_models, message)
    assert latest_model(kafka, config.topics.ltv_models) == message
    assert cleanup_policy(kafka, config.topics.ltv_models) == "compact"
    publish_conversions(kafka, config.topics.conversions, orders, corrections,
                        config.flink.user_buckets)

    started = time.monotonic()
    run_ltv_job(config, kafka, env=flink.environment(config))
    took = time.monotonic() - started
    latest = latest_rows(kafka, config.topics.customer_ltv)
    print(f"\nltv job: {len(orders) + len(corrections)} conversions, "
          f"{sum(1 for _ in read_all(kafka, config.topics.customer_ltv))} customer_ltv rows "
          f"in {took:.1f} s")
    assert set(latest) == {o[1] for o in final}
    assert_batch_equal(latest, final, message)
    # the end of the input closed every bucket as of its last order's day
    buckets = config.flink.user_buckets
    last = {}
    for _, user, ts, _ in final:
        bucket = bucket_of(user, buckets)
        last[bucket] = max(last.get(bucket, 0), ts // DAY_MS)
    assert {u: r["as_of_day"] for u, r in latest.items()} == {
        u: str(np.datetime64(last[bucket_of(u, buckets)], "D")) for u in latest}
    assert len({r["segment"] for r in latest.values()}) == 4
    assert messages(kafka, config.topics.ltv_dead_letter) == []

    with Warehouse(f"sqlite:///{tmp_path / 'wh.db'}") as warehouse:
        loaded = TopicLoader(warehouse).load_customer_ltv(kafka, config.topics.customer_ltv)
        names = rows.CUSTOMER_LTV.names
        table = {r[0]: dict(zip(names, r, strict=True)) for r in warehouse.query(
            f"SELECT {', '.join(names)} FROM customer_ltv")}
    assert loaded > len(latest) and table.keys() == latest.keys()
    assert all(table[u][name] == pytest.approx(latest[u][name], rel=1e-12)
               for u in latest for name in SCORES)
    assert all(table[u]["segment"] == latest[u]["segment"] for u in latest)


def cleanup_policy(kafka: str, name: str) -> str:
    return topic_setting(kafka, name, "cleanup.policy")


def wait_for(what, check, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def test_tallies_wait_for_the_first_model_and_a_bad_model_is_set_aside(
        kafka, flink, job_config, topic, tmp_path):
    config = ltv_topics(job_config, topic)
    config = config.replace("input", bounded=False).replace("event_time", idleness_s=1.0)
    # made here as `seedance run` makes them before the job starts
    fresh = uuid.uuid4().hex[:8]
    config = config.replace("topics", ltv_models=f"ltv-models-{fresh}",
                            customer_ltv=f"customer-ltv-{fresh}")
    final = customers_orders(users=200, seed=4)
    before = [o for o in final if o[2] < T0 + 30 * DAY_MS]
    after = [o for o in final if o[2] >= T0 + 30 * DAY_MS]
    assert before and after
    message = fitted_message(final)
    ensure_topics(kafka, [config.topics.ltv_models, config.topics.customer_ltv,
                          config.topics.ltv_dead_letter], settings=LTV.topic_settings(config))
    assert [cleanup_policy(kafka, t) for t in (config.topics.ltv_models,
                                               config.topics.customer_ltv,
                                               config.topics.ltv_dead_letter)] == [
        "compact", "compact", "delete"]
    publish_conversions(kafka, config.topics.conversions, before, [],
                        config.flink.user_buckets)
    env = flink.environment(config)
    build_ltv_pipeline(env, config, kafka)
    job = env.execute_async("ltv-first-model")
    group = config.input.group_id + "-ltv"
    wait_for("the orders before the model read and checkpointed",
             lambda: consumer_lag(kafka, group, config.topics.conversions) == 0)
    time.sleep(3)  # a checkpoint or two more: anything emitted would be committed now
    assert list(read_all(kafka, config.topics.customer_ltv)) == []  # tallies only

    out = producer(kafka)
    out.send(config.topics.ltv_models, b'{"model": "bg/nbd+gamma-gamma", "purchases": 1}',
             key=b"current").get(30)
    out.close()
    publish_model(kafka, config.topics.ltv_models, message)
    letters = wait_for("the malformed model's dead letter",
                       lambda: messages(kafka, config.topics.ltv_dead_letter))
    assert len(letters) == 1 and letters[0]["reason"] == "invalid_ltv_model"
    assert letters[0]["detail"].startswith("not an LTV model")
    assert letters[0]["source"] == config.topics.ltv_models and letters[0]["offset"] == 0
    publish_conversions(kafka, config.topics.conversions, after, [],
                        config.flink.user_buckets)
    wait_for("every order and model read and checkpointed",
             lambda: consumer_lag(kafka, group, config.topics.conversions) == 0
             and consumer_lag(kafka, group, config.topics.ltv_models) == 0)
    drain(job, tmp_path / "final")

    every = [table_messages.decode(v)[0] for _, v in read_all(kafka,
                                                               config.topics.customer_ltv)]
    assert every and {r["fitted_through_day"] for r in every} == {
        str(np.datetime64(int(message.version), "D"))}
    latest = latest_rows(kafka, config.topics.customer_ltv)
    assert set(latest) == {o[1] for o in final}
    assert_batch_equal(latest, final, message)
    assert latest_model(kafka, config.topics.ltv_models) == message
