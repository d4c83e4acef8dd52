"""The streaming LTV job's logic without Flink: tallies of orders by order id give the batch
summaries (udfs.ltv.model.summaries_from_transactions) whatever the arrival order and however
often an order is corrected; segments by fixed bounds; the model message and its bad
forms; the scoring operator driven through restores, before and after its first model."""

from __future__ import annotations

import base64
import copy
import json
import pickle
import random

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.codec import table_messages
from pipelines.codec.dead_letters import DEAD_LETTER_PAYLOAD_BYTES
from pipelines.codec.frame import frame
from pipelines.flink.ltv.scores import (
    DEAD_LETTERS,
    DecodeOrders,
    ParseModels,
    ScoreCustomers,
    orders_by_bucket,
)
from pipelines.ltv.models_topic import KEY, ModelMessage
from schemas import rows
from tests.flink_fakes import FakeContext, FakeMapState, StateStore, Timers, outputs
from udfs.journeys.book import bucket_of
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel, summaries_from_transactions
from udfs.ltv.segments import SEGMENTS, score_customers, segment_thresholds
from udfs.ltv.tally import (
    CloseClock,
    Tallies,
    customer_rows,
    customer_scores,
    segment_of,
    summaries_at,
    summaries_of,
)
from udfs.periods import DAY_MS

T0 = 20_000 * DAY_MS  # 2024-10-04
MODEL = LtvModel(BgNbd(0.243, 4.414, 0.793, 2.426), GammaGamma(6.25, 3.74, 15.44), 7.0, 2357.0,
                 20_030.0)
MESSAGE = ModelMessage(MODEL, 365, 0.0, (10.0, 40.0, 90.0))


def batch(orders, end_day, period_days=7.0, shuffle_seed=None):
    """The batch side: summaries_from_transactions over these orders (optionally shuffled)."""
    orders = list(orders)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(orders)
    return summaries_from_transactions(
        np.asarray([o[1] for o in orders], dtype=object),
        np.asarray([o[2] for o in orders], dtype=np.float64) / DAY_MS,
        np.asarray([o[3] for o in orders], dtype=np.float64), end_day, period_days)


def assert_same(got, want, exact=True):
    (ids, s), (want_ids, w) = got, want
    assert ids.tolist() == want_ids.tolist()
    for name in ("frequency", "recency", "age", "weight"):
        assert np.array_equal(getattr(s, name), getattr(w, name)), name
    if exact:
        assert np.array_equal(s.monetary, w.monetary)
    else:
        np.testing.assert_allclose(s.monetary, w.monetary, rtol=1e-12)


@st.composite
def histories(draw, dyadic=True):
    """Orders with versions (each a later report of the same order id: another user, time
    or amount) and an arrival order that keeps each order's versions in order, as the
    conversions topic does (keyed by bucket); the final version of each order."""
    users = [f"user-{i}" for i in range(draw(st.integers(1, 6)))]
    amount = (st.integers(0, 4000).map(lambda q: q / 4) if dyadic
              else st.floats(0, 1000, allow_nan=False))
    versions = [[(f"order-{k}", draw(st.sampled_from(users)),
                  draw(st.integers(T0, T0 + 60 * DAY_MS)), draw(amount))
                 for _ in range(draw(st.integers(1, 3)))]
                for k in range(draw(st.integers(1, 25)))]
    slots = draw(st.permutations([k for k, vs in enumerate(versions) for _ in vs]))
    taken = [0] * len(versions)
    arrival = []
    for k in slots:
        arrival.append(versions[k][taken[k]])
        taken[k] += 1
    return arrival, [vs[-1] for vs in versions]


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(-3, 66), st.sampled_from([7.0, 1.0, 30.0]), st.integers(0, 9))
def test_tallies_give_the_batch_summaries_whatever_the_arrival(history, offset, period, seed):
    arrival, final = history
    tallies = Tallies()
    cut = len(arrival) // 2
    tallies.add(arrival[:cut])
    # a restore in the middle: the stored tallies (pickled, as the state backend keeps them)
    tallies = Tallies(pickle.loads(pickle.dumps(tallies.users)))
    tallies.add(arrival[cut:])
    as_of = T0 // DAY_MS + offset
    assert_same(summaries_of(tallies.users, as_of, period),
                batch(final, as_of, period, shuffle_seed=seed))
    assert {o for orders in tallies.users.values() for o in orders} == {o[0] for o in final}


@settings(max_examples=100, deadline=None)
@given(histories(dyadic=False), st.integers(0, 62))
def test_any_amounts_agree_to_the_last_bits_and_exactly_in_time_order(history, offset):
    arrival, final = history
    tallies = Tallies()
    tallies.add(arrival)
    as_of = T0 // DAY_MS + offset
    got = summaries_of(tallies.users, as_of, 7.0)
    assert_same(got, batch(final, as_of, shuffle_seed=offset), exact=False)
    # in the tally's order (time, then order id) the batch sums alike, bit for bit
    assert_same(got, batch(sorted(final, key=lambda o: (o[1], o[2], o[0])), as_of))


def test_a_corrected_order_moves_and_an_emptied_tally_goes():
    tallies = Tallies()
    assert tallies.add([("o1", "a", T0, 10.0), ("o2", "a", T0 + DAY_MS, 5.0)]) == {"a"}
    assert tallies.add([("o1", "b", T0 + 2 * DAY_MS, 12.0)]) == {"a", "b"}
    assert tallies.users == {"a": {"o2": (T0 + DAY_MS, 5.0)}, "b": {"o1": (T0 + 2 * DAY_MS,
                                                                          12.0)}}
    assert tallies.add([("o2", "b", T0, 7.0)]) == {"a", "b"}
    assert set(tallies.users) == {"b"} and tallies.last_day("b") == T0 // DAY_MS + 2


def test_summaries_at_groups_users_by_their_day():
    tallies = Tallies()
    tallies.add([("o1", "a", T0, 10.0), ("o2", "a", T0 + 3 * DAY_MS, 5.0),
                  ("o3", "b", T0 + DAY_MS, 8.0), ("o4", "c", T0 + 9 * DAY_MS, 1.0)])
    day = T0 // DAY_MS
    ids, days, summaries = summaries_at(tallies.users, {"a": day + 5, "b": day + 1,
                                                        "c": day + 5}, 7.0)
    assert ids.tolist() == ["b", "a"]
    assert days.tolist() == [day + 1, day + 5]  # c's first order is after its day: no row
    assert summaries.age.tolist() == [0.0, 5 / 7]


def test_segments_by_bounds():
    bounds = (1.0, 2.0, 2.0)
    assert segment_of(np.array([0.5, 1.0, 1.5, 2.0, 2.5]), bounds).tolist() == \
        ["low", "low", "mid", "mid", "top"]  # on a bound: below it; equal bounds: no "high"
    values = np.arange(100.0)
    counts = {name: int(n) for name, n in zip(*np.unique(
        segment_of(values, segment_thresholds(values)), return_counts=True), strict=True)}
    assert counts == {"low": 50, "mid": 30, "high": 15, "top": 5}
    for bad in ((2.0, 1.0, 3.0), (1.0, float("nan"), 3.0)):
        with pytest.raises(ValueError, match="non-decreasing"):
            segment_of(values, bad)
    with pytest.raises(ValueError, match="3 segment bounds make 4 segments, got 3 names"):
        segment_of(values, (1.0, 2.0, 3.0), ("a", "b", "c"))
    with pytest.raises(ValueError, match="distinct"):
        segment_of(values, (1.0,), ("a", "a"))


def test_scores_are_the_models_own():
    ids, summaries = batch([("o1", "a", T0, 10.0), ("o2", "a", T0 + 9 * DAY_MS, 30.0),
                            ("o3", "a", T0 + 20 * DAY_MS, 20.0), ("o4", "b", T0, 5.0)],
                           T0 // DAY_MS + 30)
    scores = customer_scores(MODEL, ids, summaries, 365, 0.01, MESSAGE.bounds)
    horizon = 365 / 7
    batch_frame = score_customers(MODEL, ids, summaries, 365, discount_rate=0.01)
    assert all(np.array_equal(scores[name], batch_frame[name].to_numpy())
               for name in scores if name != "segment")
    assert np.array_equal(scores["p_alive"], MODEL.purchases.probability_alive(summaries))
    assert np.array_equal(scores["expected_purchases"],
                          MODEL.purchases.expected_purchases(horizon, summaries))
    assert np.array_equal(scores["predicted_ltv"],
                          MODEL.lifetime_value(summaries, horizon, 0.01))
    assert np.array_equal(scores["recency_days"], summaries.recency * 7)
    assert scores["segment"].tolist() == segment_of(scores["predicted_ltv"],
                                                    MESSAGE.bounds).tolist()
    rows_ = customer_rows(ids, np.array([T0 // DAY_MS + 30] * 2), scores, 365, 20_030.5)
    assert [r["user_id"] for r in rows_] == ["a", "b"]
    assert set(rows_[0]) == set(rows.CUSTOMER_LTV.names)
    assert rows_[0]["as_of_day"] == "2024-11-03" and rows_[0]["fitted_through_day"] == \
        "2024-11-03"
    assert rows_[0]["frequency"] == 2.0 and isinstance(rows_[0]["p_alive"], float)


def test_close_clock():
    clock = CloseClock()
    assert clock.note([5, 3, 5]) == [3, 5] and clock.note([3, 4]) == [4]
    assert clock.close(4 * DAY_MS - 2) is None  # day 3 not over yet
    assert clock.close(5 * DAY_MS - 1) == 4 and clock.state() == (4, [5])  # 3 and 4 passed
    assert clock.note([2, 4, 6]) == [6]  # days before the last close wait for nothing
    tallies = Tallies()
    tallies.add([("o", "u", 2 * DAY_MS, 1.0), ("p", "v", 9 * DAY_MS, 1.0)])
    assert clock.as_of(tallies, {"u", "v", "gone"}) == {"u": 4, "v": 9}
    assert clock.close_all() == 6 and clock.state() == (6, [])
    assert CloseClock(*pickle.loads(pickle.dumps(clock.state()))).state() == (6, [])


def test_model_message_round_trip_and_its_segments_from_a_fit():
    text = MESSAGE.to_json()
    assert ModelMessage.from_json(text) == MESSAGE and ModelMessage.from_json(
        text.encode()).version == 20_030.0
    data = json.loads(text)
    assert data["segments"] == {"names": list(SEGMENTS), "bounds": [10.0, 40.0, 90.0]}
    assert data["horizon_days"] == 365 and data["purchases"]["r"] == 0.243
    _, summaries = batch([(f"o{i}", f"u{i % 40}", T0 + (i * 7919 % 50) * DAY_MS, 5.0 + i % 13)
                          for i in range(200)], T0 // DAY_MS + 50)
    fitted = ModelMessage.fitted(MODEL, summaries, 180, 0.0)
    value = MODEL.lifetime_value(summaries, 180 / 7)
    assert fitted.bounds == tuple(np.quantile(value, (0.5, 0.8, 0.95)))
    ids = np.arange(len(summaries))
    assert np.array_equal(fitted.scores(ids, summaries)["segment"],
                          segment_of(value, fitted.bounds))


def _bad(change):
    data = json.loads(MESSAGE.to_json())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "must be JSON"),
    ("[1, 2]", "must be a JSON object"),
    (_bad(lambda d: d.pop("horizon_days")), "'horizon_days' is missing"),
    (_bad(lambda d: d.update(horizon_days=36.5)), "whole number of days"),
    (_bad(lambda d: d.update(horizon_days=0)), "horizon_days must be a whole number"),
    (_bad(lambda d: d.update(discount_rate=-1)), "discount_rate must be above -1"),
    (_bad(lambda d: d.update(segments={"bounds": [1, 2]})), "'segments' must be an object"),
    (_bad(lambda d: d["segments"].update(bounds=[3, 2, 1])), "non-decreasing"),
    (_bad(lambda d: d["segments"].update(names=["a", "b"])), "make 4 segments, got 2"),
    (_bad(lambda d: d["spend"].update(q=0.9)), "spend.q must be above 1"),
    (_bad(lambda d: d["purchases"].update(r=-1)), "'purchases.r' must be positive"),
    (_bad(lambda d: d.update(model="pareto")), "field 'model' must be"),
    (_bad(lambda d: d.update(extra=1)), "unknown field 'extra'"),
])
def test_bad_model_messages_say_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        ModelMessage.from_json(text)


def test_decoding_and_parsing_set_bad_messages_aside():
    conversions = table_messages.encode_bytes(rows.CONVERSION, [
        ("o1", "alice", T0, 12.5, "USD", "new", 1, []),
        ("o2", "", T0, 3.0, "USD", "unknown", 0, []),  # anonymous: no customer
        ("o3", "bob", T0 + 5, 4.0, "USD", "new", 0, [])])
    got = outputs(DecodeOrders(4, "conversions").process_element(frame(conversions), None))
    assert sorted(got) == sorted(
        (bucket, max(o[2] for o in orders), orders)
        for bucket, orders in orders_by_bucket(table_messages.decode(conversions), 4).items())
    assert {o[0] for _, _, orders in got for o in orders} == {"o1", "o3"}
    assert all(bucket == bucket_of(o[1], 4) for bucket, _, orders in got for o in orders)
    for value in (b"garbage", None):
        (tag, letter), = outputs(DecodeOrders(4, "conversions").process_element(
            frame(value, partition=2, offset=7), None))
        # every job's dead letter (pipelines/codec/dead_letters.py)
        found = json.loads(letter)
        assert tag is DEAD_LETTERS and found["reason"] == "unreadable_message"
        assert (found["source"], found["partition"], found["offset"]) == ("conversions", 2, 7)
        assert "unreadable conversions message" in found["detail"]
        assert base64.b64decode(found["payload_base64"]) == (value or b"")
    parse = ParseModels("ltv_models")
    assert outputs(parse.process_element(frame(MESSAGE.to_json().encode()), None)) == \
        [MESSAGE.to_json()]
    bad = _bad(lambda d: d.pop("segments")).encode()
    (tag, letter), = outputs(parse.process_element(frame(bad, offset=3), None))
    found = json.loads(letter)
    assert tag is DEAD_LETTERS and found["reason"] == "invalid_ltv_model"
    assert found["detail"].startswith("not an LTV model") and "segments" in found["detail"]
    assert (found["source"], found["offset"]) == ("ltv_models", 3)
    assert base64.b64decode(found["payload_base64"]) == bad


def test_an_oversized_message_is_a_dead_letter_of_its_first_bytes():
    """A dead letter always fits on its topic: of a message larger than the cap only the
    first DEAD_LETTER_PAYLOAD_BYTES are kept, and the letter says how large it was."""
    value = b"x" * (DEAD_LETTER_PAYLOAD_BYTES + 10)
    for operator in (DecodeOrders(4, "conversions"), ParseModels("ltv_models")):
        (tag, letter), = outputs(operator.process_element(frame(value, offset=5), None))
        found = json.loads(letter)
        assert tag is DEAD_LETTERS and found["offset"] == 5
        assert (found["payload_bytes"], found["payload_truncated"]) == (len(value), True)
        assert base64.b64decode(found["payload_base64"]) == value[:DEAD_LETTER_PAYLOAD_BYTES]


class Broadcast(FakeContext):
    """FakeContext with the broadcast state a KeyedBroadcastProcessFunction reads."""

    def __init__(self, timers, key, models):
        super().__init__(timers, key)
        self.models = models

    def get_broadcast_state(self, descriptor):
        return self.models


class Driver:
    """One ScoreCustomers instance over a state store, timers and broadcast state."""

    def __init__(self, store=None, timers=None, models=None):
        self.store, self.timers = store or StateStore(), timers or Timers()
        self.models = FakeMapState() if models is None else models
        self.function = ScoreCustomers()
        self.function.open(self.store.runtime_context())

    def ctx(self, key):
        self.store.current_key = key
        return Broadcast(self.timers, key, self.models)

    def orders(self, orders):
        out = []
        for bucket, found in sorted(orders_by_bucket(
                [{"order_id": o, "user_id": u, "conversion_ts_ms": t, "revenue": r}
                 for o, u, t, r in orders], 3).items()):
            newest = max(order[2] for order in found)
            out += outputs(self.function.process_element((bucket, newest, found),
                                                         self.ctx(bucket)))
        return out

    def watermark(self, at):
        self.timers.watermark = at
        out = []
        for timestamp, key in self.timers.due():
            self.timers.registered.discard((timestamp, key))
            out += outputs(self.function.on_timer(timestamp, self.ctx(key)))
        return out

    def model(self, message):
        self.function.process_broadcast_element(message.to_json(), self.ctx(None))

    def checkpoint(self):
        return Driver(copy.deepcopy(self.store), copy.deepcopy(self.timers),
                      copy.deepcopy(self.models))


def decoded(records):
    return [orjson.loads(table_messages.unkeyed(r)) for r in records]


def assert_batch_rows(found, known):
    """Each row against the batch over the orders the operator had seen (their latest
    versions), as of the row's day."""
    final = {o[0]: o for o in known}.values()
    for row in found:
        day = int(np.datetime64(row["as_of_day"], "D").astype(np.int64))
        mine = [o for o in final if o[1] == row["user_id"]]
        ids, summaries = batch(sorted(mine, key=lambda o: (o[2], o[0])), day)
        assert ids.tolist() == [row["user_id"]]
        scores = MESSAGE.scores(ids, summaries)
        for name in ("frequency", "recency_days", "age_days", "monetary", "p_alive",
                     "expected_purchases", "expected_order_value", "predicted_ltv"):
            assert row[name] == pytest.approx(float(scores[name][0]), rel=1e-12), name
        assert row["segment"] == scores["segment"][0]


def test_the_operator_scores_after_its_first_model_and_restores_exactly():
    random_ = random.Random(5)
    orders = [(f"o{i}", f"u{random_.randrange(30)}", T0 + random_.randrange(40 * DAY_MS),
               float(random_.randrange(1, 200))) for i in range(300)]
    orders.sort(key=lambda o: o[2])
    first, second, third = orders[:100], orders[100:200], orders[200:]
    live = Driver()
    assert live.orders(first) == [] and live.watermark(first[-1][2]) == []  # no model yet
    assert live.store.by_key and live.timers.registered
    live.model(MESSAGE)
    restored = live.checkpoint()
    # a later version of an order: another time and amount, and (as a tally allows within
    # a bucket; the attribution job fixes an order's user before it reports it) another user
    moved_to = next(f"u{i}" for i in range(30) if f"u{i}" != first[5][1]
                    and bucket_of(f"u{i}", 3) == bucket_of(first[5][1], 3))
    correction = (first[5][0], moved_to, T0 + 3 * DAY_MS, 1.0)
    known = [*first, *second, correction]
    runs = []
    for driver in (live, restored):  # restored: nothing in memory, all from state
        steps = [decoded(driver.orders([*second, correction]))]
        assert {r["user_id"] for r in steps[0]} == {o[1] for o in [*second, correction]} | {
            first[5][1]}  # the scored: those whose orders changed
        watermark = second[-1][2] - DAY_MS
        steps.append(decoded(driver.watermark(watermark)))
        # a close: every user with an order on a day the watermark has passed the end of
        assert len(steps[1]) == len({o[1] for o in known
                                     if (o[2] // DAY_MS + 1) * DAY_MS - 1 <= watermark})
        for found in steps:
            assert_batch_rows(found, known)
        steps.append(decoded(driver.orders(third)))
        steps.append(decoded(driver.watermark(2**63 - 1)))
        for found in steps[2:]:
            assert_batch_rows(found, [*known, *third])
        runs.append(steps)
    assert runs[0] == runs[1]
    latest = {row["user_id"]: row for step in runs[0] for row in step}
    assert len(latest) == 30
    # at the end every customer's latest row is as of its bucket's last order day
    final = {o[0]: o for o in [*orders, correction]}.values()
    for bucket in range(3):
        mine = [o for o in final if bucket_of(o[1], 3) == bucket]
        last = max(o[2] for o in mine) // DAY_MS
        assert {latest[o[1]]["as_of_day"] for o in mine} == {
            str(np.datetime64(last, "D"))}
    assert live.models.keys() == [KEY]


def test_customers_the_model_cannot_value_are_a_dead_letter_and_the_job_goes_on(monkeypatch):
    class Broken(LtvModel):
        def lifetime_value(self, summaries, horizon, discount_rate=0.0, step=1.0):
            return np.full(len(summaries), np.nan)

    broken = ModelMessage(Broken(MODEL.purchases, MODEL.spend, 7.0, 10.0, 20_030.0), 365, 0.0,
                          MESSAGE.bounds)
    driver = Driver()
    monkeypatch.setattr(driver.function, "_model", lambda ctx: broken)
    (tag, letter), = driver.orders([("o1", "u1", T0, 5.0)])
    found = json.loads(letter)
    assert tag is DEAD_LETTERS and found["reason"] == "not_scored"
    assert "no finite value" in found["detail"] and found["source"] == "ltv"
    monkeypatch.setattr(driver.function, "_model", lambda ctx: MESSAGE)
    assert [r["user_id"] for r in decoded(driver.orders([("o2", "u1", T0 + DAY_MS, 5.0)]))] \
        == ["u1"]
