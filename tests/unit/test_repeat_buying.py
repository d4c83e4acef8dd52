"""Sample users with a known buying process (pipelines/sources/repeat_buying.py): the plan's
orders, summarised and fitted per acquisition cohort with udfs.ltv.model, give back the BG/NBD and
Gamma-Gamma parameters they were drawn from; without the process the plan is what it was."""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from pipelines.sources.generator import CHANNELS, DAY_NS, Plan, plan_events
from pipelines.sources.publish import DEMO_EXPERIMENTS
from pipelines.sources.repeat_buying import (
    DEMO_REPEAT_BUYING,
    DIRECT,
    REPEAT_BUYING_PRESETS,
    BuyingProcess,
    RepeatBuying,
    draw_orders,
)
from udfs.ltv.model import BgNbd, bootstrap_intervals, fit_model, summaries_from_transactions

START = datetime(2026, 10, 1, tzinfo=UTC)  # plan_events' default start
USERS, DAYS, SEED = 12_000, 365, 2
COHORTS = ("paid_social", "paid_search", "rest")  # "rest": every channel of the default
MINUTES_PER_DAY = 1440


def digest(plan: Plan) -> str:
    h = hashlib.sha256()
    for e in plan.events:
        h.update(repr((e.kind, e.user_id, e.ts_ns, e.channel, e.campaign, e.order_id, e.revenue,
                       e.emit_rank, e.gpu_uuid, e.flag_key, e.variant)).encode())
    h.update(repr(plan.malformed).encode())
    return h.hexdigest()


def test_without_repeat_buying_the_plan_is_what_it_was() -> None:
    # every test's sample comes from plan_events: these digests were taken from the plan
    # before repeat buying existed, so no change to the generator alters them unnoticed
    plan = plan_events(300, seed=5)
    assert plan.events == plan_events(300, seed=5, repeat_buying=None).events
    assert digest(plan) == "9e9aa02208092b5f5f89149052ad68536b42e9b7dabefe95d084c8dbf1d38d7b"
    assert digest(plan_events(200, seed=9, days=20, experiments=DEMO_EXPERIMENTS,
                              batch_busy=0.3)) == \
        "c9923b4a915a43aa867ead81da24ac133becff4c9da25ae18a887e61d4575c4a"


def acquisition(plan: Plan) -> dict[str, str]:
    """Each converting user's acquisition channel: the last touch before its first order."""
    last_touch: dict[str, str] = {}
    acquired: dict[str, str] = {}
    for e in sorted(plan.events, key=lambda e: (e.ts_ns, e.kind)):
        if e.kind == "touchpoint" and e.user_id not in acquired:
            last_touch[e.user_id] = e.channel
        elif e.kind in ("conversion", "invalid_conversion") and e.user_id not in acquired:
            acquired[e.user_id] = last_touch.get(e.user_id, DIRECT)
    return acquired


def test_repeat_orders_follow_the_first_order_as_described() -> None:
    plan = plan_events(400, seed=3, days=120, repeat_buying=DEMO_REPEAT_BUYING)
    assert digest(plan) == digest(plan_events(400, seed=3, days=120,
                                              repeat_buying=DEMO_REPEAT_BUYING))
    assert digest(plan) != digest(plan_events(400, seed=4, days=120,
                                              repeat_buying=DEMO_REPEAT_BUYING))
    end_ns = int(START.timestamp()) * 1_000_000_000 + 120 * DAY_NS
    orders = [e for e in plan.events if e.kind in ("conversion", "invalid_conversion")]
    assert all(e.ts_ns < end_ns for e in plan.events if e.kind != "gpu_batch")
    # order ids continue one sequence, each once
    numbers = sorted(int(e.order_id.split("-")[1]) for e in orders)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    by_user: dict[str, list] = defaultdict(list)
    for e in sorted(plan.events, key=lambda e: (e.ts_ns, e.kind)):
        if e.kind in ("touchpoint", "conversion", "invalid_conversion"):
            by_user[e.user_id].append(e)
    retargeting = set(DEMO_REPEAT_BUYING.retargeting)
    repeats = retargeted = 0
    for events in by_user.values():
        kinds = [e.kind for e in events]
        if "conversion" not in kinds and "invalid_conversion" not in kinds:
            continue
        first = next(i for i, e in enumerate(events) if e.kind != "touchpoint")
        for before, e in zip(events[first:], events[first + 1:], strict=False):
            if e.kind == "touchpoint":  # after the first order: one retargeting touch
                assert (e.channel, e.campaign) in retargeting and before.kind != "touchpoint"
                retargeted += 1
            else:
                assert e.kind == "conversion" and e.revenue > 0
                repeats += 1
    assert repeats > 150 and 0 < retargeted < repeats * 0.15
    # a channel's first orders may follow its own value: paid social's are small
    first_orders: dict[str, list[float]] = defaultdict(list)
    seen: set[str] = set()
    channel_of = acquisition(plan)
    for e in sorted(orders, key=lambda e: e.ts_ns):
        if e.user_id not in seen and e.kind == "conversion":
            first_orders[channel_of[e.user_id]].append(e.revenue)
        seen.add(e.user_id)
    social = np.mean(first_orders["paid_social"])
    search = np.mean(first_orders["paid_search"])
    assert social < 0.5 * search, (social, search)


def test_draws_are_the_bgnbd_generating_process() -> None:
    # one user's orders: a purchase rate, a dropout after each repeat purchase, its values
    process = BuyingProcess(r=1.0, alpha=1.0, a=1.0, b=1e-9 + 1e9, p=2.0, q=3.0, v=4.0)
    rng = random.Random(1)
    week = 7 * DAY_NS
    counts = [len(draw_orders(process, 0, 10 * week, 9.99, rng)) - 1 for _ in range(4000)]
    # no dropout: x ~ Poisson(10 lambda), lambda ~ Gamma(1, 1): E[x] = 10
    assert np.mean(counts) == pytest.approx(10.0, rel=0.06)
    sure_to_leave = replace(process, a=1e9, b=1.0)  # dropout after the first repeat purchase
    assert max(len(draw_orders(sure_to_leave, 0, 10 * week, 9.99, rng))
               for _ in range(500)) == 2
    assert draw_orders(process, 0, 10 * week, 9.99, rng)[0] == (0, 9.99, None)
    firsts = [draw_orders(replace(process, first_p=1.0), 0, 1, 9.99, rng)[0].revenue
              for _ in range(4000)]
    assert np.mean(firsts) == pytest.approx(1.0 * 4.0 / 2.0, rel=0.1)  # first_p v / (q - 1)


def test_a_process_names_what_is_wrong_and_channels_fall_back_to_the_default() -> None:
    with pytest.raises(ValueError, match="BuyingProcess.alpha must be a positive number"):
        BuyingProcess(r=1.0, alpha=0.0, a=1.0, b=1.0, p=1.0, q=2.0, v=1.0)
    with pytest.raises(ValueError, match="first_p"):
        BuyingProcess(r=1.0, alpha=1.0, a=1.0, b=1.0, p=1.0, q=2.0, v=1.0, first_p=-1.0)
    with pytest.raises(ValueError, match="retarget_share"):
        RepeatBuying({}, DEMO_REPEAT_BUYING.default, retarget_share=1.5)
    assert DEMO_REPEAT_BUYING.process(DIRECT) is DEMO_REPEAT_BUYING.default
    assert DEMO_REPEAT_BUYING.process("display") is DEMO_REPEAT_BUYING.default
    assert set(DEMO_REPEAT_BUYING.channels) <= set(CHANNELS)
    assert {c for c, _ in DEMO_REPEAT_BUYING.retargeting} <= set(CHANNELS)
    assert all(campaign in CHANNELS[c] for c, campaign in DEMO_REPEAT_BUYING.retargeting)
    assert REPEAT_BUYING_PRESETS["demo"] is DEMO_REPEAT_BUYING


@pytest.fixture(scope="module")
def cohorts() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per acquisition cohort the plan's valid orders: user, minute since the start, value."""
    plan = plan_events(USERS, seed=SEED, days=DAYS, repeat_buying=DEMO_REPEAT_BUYING)
    channel_of = acquisition(plan)
    start_ns = int(START.timestamp()) * 1_000_000_000
    rows: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for e in plan.events:
        if e.kind == "conversion":
            channel = channel_of[e.user_id]
            cohort = channel if channel in DEMO_REPEAT_BUYING.channels else "rest"
            rows[cohort].append((e.user_id, (e.ts_ns - start_ns) // 60_000_000_000, e.revenue))
    return {cohort: (np.array([r[0] for r in rows[cohort]]),
                     np.array([r[1] for r in rows[cohort]], dtype=np.float64),
                     np.array([r[2] for r in rows[cohort]])) for cohort in COHORTS}


def process_of(cohort: str) -> BuyingProcess:
    return DEMO_REPEAT_BUYING.process(cohort)


def test_the_fit_recovers_each_cohorts_generating_parameters(cohorts) -> None:
    # Purchases counted at their minute (the summaries' "day" is a minute here, a period
    # 7 x 1440 of them): the process as generated. Counted by day (the next test), two
    # purchases on one day are one, which takes ~1.5 % of a cohort's purchases, mostly
    # from its heaviest buyers, and moves r and alpha up by ~3 % and ~6 % (seen on 60,000
    # customers): more than the intervals of 4,000 customers allow for.
    for cohort in COHORTS:
        users, minute, revenue = cohorts[cohort]
        _, summaries = summaries_from_transactions(
            users, minute, revenue, end_day=DAYS * MINUTES_PER_DAY - 1,
            period_days=7 * MINUTES_PER_DAY)
        assert summaries.customers() > 1400
        intervals = bootstrap_intervals(summaries, rounds=100, level=0.99, seed=SEED)
        process = process_of(cohort)
        for name in ("r", "alpha", "a", "b", "p", "q", "v"):
            low, high = intervals[name]
            assert low <= getattr(process, name) <= high, (cohort, name, low, high)
        model = fit_model(summaries, 7.0, DAYS - 1)
        assert model.spend.population_mean() == pytest.approx(process.mean_order_value(),
                                                              rel=0.05)


def test_fits_on_purchase_days_keep_the_channels_apart_as_designed(cohorts) -> None:
    # as the pipeline sees the orders: purchase days, periods of 7 days, through the last day
    expected = {}
    for cohort in COHORTS:
        users, minute, revenue = cohorts[cohort]
        _, summaries = summaries_from_transactions(users, minute / MINUTES_PER_DAY, revenue,
                                                   end_day=DAYS - 1, period_days=7.0)
        model = fit_model(summaries, 7.0, DAYS - 1)
        process = process_of(cohort)
        truth = BgNbd(process.r, process.alpha, process.a, process.b)
        expected[cohort] = float(model.purchases.expected_purchases_new(52.0))
        assert expected[cohort] == pytest.approx(float(truth.expected_purchases_new(52.0)),
                                                 rel=0.1)
        assert model.spend.population_mean() == pytest.approx(process.mean_order_value(),
                                                              rel=0.1)
    # paid social's customers come back several times a year, paid search's about once
    assert expected["paid_social"] > 5 > 2 > expected["paid_search"]
    assert expected["paid_social"] > expected["rest"] > expected["paid_search"]


def test_seedance_generate_takes_the_demo_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs.cli import main
    from pipelines.sources import publish

    plans: list[Plan] = []
    monkeypatch.setattr(publish, "publish_plan", lambda plan, *args, **kwargs: (
        plans.append(plan), 0)[1])
    for extra in ([], ["--repeat-buying", "demo"]):
        assert main(["generate", "--users", "30", "--days", "60", "--bootstrap", "k:1",
                     *extra]) == 0
    assert plans[0].events == plan_events(30, days=60).events
    assert plans[1].events == plan_events(30, days=60,
                                          repeat_buying=DEMO_REPEAT_BUYING).events
    assert plans[0].events != plans[1].events
