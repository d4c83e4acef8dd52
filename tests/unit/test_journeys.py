import random

import pytest

from schemas.records import Conversion, Touchpoint
from udfs.journeys.rules import (
    DAY_MS,
    JourneyConfig,
    JourneyState,
    close_stale,
    closed_journeys_of,
    expire,
    journeys_of,
    step,
)

CFG = JourneyConfig(lookback_days=30)


def touch(ts, channel, user="u"):
    return Touchpoint(user, ts, channel, f"{channel}-c", "t", "s")


def order(ts, order_id="o1", revenue=100.0, user="u"):
    return Conversion(user, ts, order_id, revenue, "USD", "t", "s")


def test_lookback_excludes_touches_older_than_the_window():
    events = [touch(0, "affiliate"), touch(31 * DAY_MS, "email"), order(31 * DAY_MS + 5)]
    (journey,) = journeys_of(events, CFG)
    assert [t.channel for t in journey.touches] == ["email"]


def test_touch_exactly_at_the_window_edge_is_inside():
    events = [touch(0, "display"), order(30 * DAY_MS)]
    (journey,) = journeys_of(events, CFG)
    assert [t.channel for t in journey.touches] == ["display"]


def test_max_touches_keeps_the_last_n():
    events = [touch(i, c) for i, c in enumerate("abcde")] + [order(10)]
    (journey,) = journeys_of(events, JourneyConfig(max_touches=2))
    assert [t.channel for t in journey.touches] == ["d", "e"]


MIN = 60_000


@pytest.mark.parametrize("minutes,touched", [
    # a reload 20 minutes after the landing continues its visit; another 20 minutes later
    # is 40 minutes after the touch kept: a visit of its own; another campaign, and a touch
    # after an order, start one too
    (30, [0, 40 * MIN, 100 * MIN, 101 * MIN, 105 * MIN]),
    (0, [0, 20 * MIN, 40 * MIN, 100 * MIN, 101 * MIN, 105 * MIN]),  # every touch counts
])
def test_a_visits_repeated_touches_count_once(minutes, touched):
    events = [touch(0, "paid_search"), touch(20 * MIN, "paid_search"),
              touch(40 * MIN, "paid_search"), touch(100 * MIN, "paid_search"),
              touch(101 * MIN, "paid_search")._replace(campaign="other"),
              order(102 * MIN), touch(105 * MIN, "paid_search"), order(106 * MIN, "o2")]
    first, second = journeys_of(events, JourneyConfig(visit_minutes=minutes))
    assert [t.ts_ms for t in (*first.touches, *second.touches)] == touched


def test_a_visit_longer_than_the_lookback_is_refused():
    with pytest.raises(ValueError, match="visit_minutes"):
        JourneyConfig(lookback_days=1, visit_minutes=24 * 60)


def test_a_conversion_closes_the_journey():
    events = [touch(1, "display"), order(2, "o1"), touch(3, "email"), order(4, "o2")]
    first, second = journeys_of(events, CFG)
    assert [t.channel for t in first.touches] == ["display"]
    assert [t.channel for t in second.touches] == ["email"]


def test_touch_at_the_same_millisecond_as_the_order_counts_for_it():
    events = [order(5), touch(5, "email")]
    (journey,) = journeys_of(events, CFG)
    assert [t.channel for t in journey.touches] == ["email"]


def test_result_does_not_depend_on_arrival_order():
    events = [touch(i * 1000, random.Random(i).choice("abc")) for i in range(30)]
    events += [order(9_500, "o1"), order(25_000, "o2"), order(40_000, "o3")]
    expected = journeys_of(events, CFG)
    for seed in range(5):
        shuffled = events[:]
        random.Random(seed).shuffle(shuffled)
        assert journeys_of(shuffled, CFG) == expected


def test_step_does_not_mutate_the_previous_state():
    state = JourneyState()
    new_state, out = step(state, touch(1, "a"), CFG)
    assert state.touches == [] and len(new_state.touches) == 1 and out == []


def test_expire_drops_touches_no_future_order_can_reach():
    state = JourneyState([touch(0, "a"), touch(40 * DAY_MS, "b")])
    kept = expire(state, 45 * DAY_MS, CFG)
    assert [t.channel for t in kept.touches] == ["b"]
    assert expire(state, 5 * DAY_MS, CFG) is state
    # the open journey's own close needs the touches within the lookback of its last one
    near = JourneyState([touch(0, "a"), touch(25 * DAY_MS, "b")])
    assert expire(near, 54 * DAY_MS, CFG) is near


def test_a_journey_closes_unconverted_when_its_lookback_passes():
    events = [touch(0, "a"), touch(10 * DAY_MS, "b"), touch(45 * DAY_MS, "c"),
              order(50 * DAY_MS), touch(60 * DAY_MS, "d")]
    closed = closed_journeys_of(events, CFG)
    assert [type(j).__name__ for j in closed] == [
        "NonConvertingJourney", "ConvertedJourney", "NonConvertingJourney"]
    first, converted, last = closed
    assert [t.channel for t in first.touches] == ["a", "b"]
    assert first.close_ts_ms == 40 * DAY_MS + 1
    assert [t.channel for t in converted.touches] == ["c"]
    assert [t.channel for t in last.touches] == ["d"] and last.close_ts_ms == 90 * DAY_MS + 1
    # the stream sees the same close from the watermark alone (no later event)
    state, none = step(JourneyState(), touch(0, "a"), CFG)
    assert none == [] and close_stale(state, 30 * DAY_MS, CFG)[1] == []
    assert close_stale(state, 30 * DAY_MS + 1, CFG)[1][0].touches == (touch(0, "a"),)


@pytest.mark.parametrize("kwargs", [{"lookback_days": 0}, {"max_touches": 0}])
def test_invalid_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        JourneyConfig(**kwargs)


def test_each_order_carries_its_lifecycle_stage():
    events = [order(0, "o1"), order(10 * DAY_MS, "o2"), order(200 * DAY_MS, "o3"),
              order(5, "o4", user="")]
    stages = {j.conversion.order_id: j.stage for j in journeys_of(
        [e for e in events if e.user_id], CFG)}
    assert stages == {"o1": "new", "o2": "repeat", "o3": "winback"}
    (anonymous,) = journeys_of([events[3]], CFG)
    assert anonymous.stage == "unknown"


def test_order_history_is_forgotten_after_history_days():
    config = JourneyConfig(winback_days=90, history_days=365)
    state, _ = step(JourneyState(), order(0), config)
    assert expire(state, 300 * DAY_MS, config).last_order_ts_ms == 0
    assert expire(state, 366 * DAY_MS, config).last_order_ts_ms is None
    with pytest.raises(ValueError, match="history_days"):
        JourneyConfig(winback_days=90, history_days=30)


def _advance_one_call_at_a_time(state, events, now, config):
    from udfs.journeys.rules import next_wake_up

    closed = []
    for event in events:
        state, produced = step(state, event, config)
        closed += produced
    state, stale = close_stale(state, now, config)
    state = expire(state, now, config)
    wake = next_wake_up(state, config)
    return (None if wake is None else state), closed + stale, wake


@pytest.mark.parametrize("max_touches", [None, 2])
def test_advance_user_equals_step_close_stale_and_expire_one_after_the_other(max_touches):
    from udfs.journeys.rules import advance_user, event_order

    config = JourneyConfig(lookback_days=3, max_touches=max_touches, winback_days=5,
                           history_days=8)
    rng = random.Random(21)
    quarter = DAY_MS // 4  # coarse times: events land exactly on the window edges too

    def at(days):  # and a millisecond either side of them
        return max(0, rng.randint(0, days * 4) * quarter + rng.choice([0, 0, 1, -1]))

    kinds = set()
    for case in range(3000):
        state = None if rng.random() < 0.3 else JourneyState(
            sorted((touch(at(6), rng.choice("abc"))
                    for _ in range(rng.randint(0, 4))), key=lambda t: t.ts_ms),
            rng.choice([None, at(6)]))
        start = max([0, *(t.ts_ms for t in (state.touches if state else ()))])
        events = sorted((rng.choice([touch, lambda ts, c, case=case: order(ts, f"o{case}")])(
            start + at(12), rng.choice("abc"))
            for _ in range(rng.randint(0, 5))), key=event_order)
        now = max([start, *(e.ts_ms for e in events)]) + at(12)
        expected = _advance_one_call_at_a_time(state or JourneyState(), events, now, config)
        assert advance_user(state, events, now, config) == expected
        kinds.add((expected[0] is None, bool(expected[1]), len({type(j) for j in expected[1]})))
    assert len(kinds) >= 5  # states kept and dropped, journeys of both kinds, none
