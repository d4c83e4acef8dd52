"""The attribution models: worked checks, properties, and agreement with peers."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.attribution import markov, shapley
from udfs.attribution.models import MODELS, ModelParams, attribute, touch_weights
from udfs.journeys.table import JourneyTable, apply_transform, from_paths
from udfs.periods import DAY_MS


def credits(frame, model):
    rows = frame[frame.model == model]
    return dict(zip(rows.channel, rows.conversions, strict=True))


# --- worked checks of DESIGN.md ------------------------------------------------------

def test_shapley_worked_check():
    table = from_paths([["A"], ["B"], ["A", "B"]], [1, 2, 3], [9, 8, 3], [0, 0, 0])
    weights = touch_weights(table, "shapley")
    assert weights[2:] == pytest.approx([0.4, 0.6], rel=1e-12)


def test_markov_worked_check():
    table = from_paths([["a", "b"], ["a", "c"]], [3, 1], [1, 1], [3, 1])
    effects = markov.removal_effects(table)
    assert effects == pytest.approx([1.0, 0.75, 0.25], rel=1e-12)
    result, _ = attribute(table, ("markov",))
    got = credits(result, "markov")
    assert got["a"] == pytest.approx(3 * 4 / 7 + 4 / 5, rel=1e-12)  # 2.514
    assert got["b"] == pytest.approx(3 * 3 / 7, rel=1e-12)  # 1.286
    assert got["c"] == pytest.approx(1 / 5, rel=1e-12)
    # peers split all conversions by RE / sum(RE) instead: 2, 1.5, 0.5
    assert (effects / effects.sum() * 4) == pytest.approx([2.0, 1.5, 0.5])


def test_rule_based_weights():
    table = from_paths([["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d", "e"]],
                       [1] * 4, [0] * 4, [0] * 4)
    pb = touch_weights(table, "position_based")
    assert list(pb[:3]) == [1.0, 0.5, 0.5]
    assert pb[3:6] == pytest.approx([0.4, 0.2, 0.4])
    assert pb[6:] == pytest.approx([0.4, 0.2 / 3, 0.2 / 3, 0.2 / 3, 0.4])
    assert list(touch_weights(table, "first_click")[6:]) == [1, 0, 0, 0, 0]
    assert list(touch_weights(table, "last_click")[6:]) == [0, 0, 0, 0, 1]


def test_time_decay_halves_per_half_life():
    # touches a and b 14 and 7 days before the conversion
    table = JourneyTable(channels=("a", "b"), campaigns=("",), offsets=np.array([0, 2]),
                         touch_channel=np.array([0, 1]), touch_campaign=np.array([0, 0]),
                         touch_ts=np.array([0, 7 * DAY_MS]), conversions=np.ones(1),
                         non_conversions=np.zeros(1), revenue=np.array([10.0]),
                         conversion_ts=np.array([14 * DAY_MS]))
    weights = touch_weights(table, "time_decay", ModelParams(half_life_days=7))
    assert weights == pytest.approx([1 / 3, 2 / 3])


def test_time_decay_on_path_summaries_is_refused():
    with pytest.raises(ValueError, match="time_decay needs touch and conversion times"):
        touch_weights(from_paths([["a"]], [1], [0], [0]), "time_decay")


def test_conversion_without_touch_is_unattributed_in_every_model():
    table = from_paths([["a"], []], [1, 2], [1, 0], [5, 7])
    result, _ = attribute(table, ("last_click", "shapley", "markov"))
    for model in ("last_click", "shapley", "markov"):
        row = result[(result.model == model) & (result.channel == "(unattributed)")]
        assert (row.conversions.item(), row.revenue.item()) == (2.0, 7.0)


# --- properties ----------------------------------------------------------------------

paths = st.lists(st.lists(st.sampled_from("abcdef"), min_size=0, max_size=7),
                 min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(paths, st.data())
def test_every_model_is_conservative(path_list, data):
    n = len(path_list)
    conv = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    non = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    revenue = [c * 10.5 for c in conv]
    table = from_paths(path_list, conv, non, revenue)
    models = tuple(m for m in MODELS if m != "time_decay")
    result, _ = attribute(table, models)
    for model in models:
        rows = result[result.model == model]
        assert math.isclose(rows.conversions.sum(), sum(conv), rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(rows.revenue.sum(), sum(revenue), rel_tol=1e-9, abs_tol=1e-9)
        weights = touch_weights(table, model)
        per_journey = np.bincount(table.journey_of_touch, weights, minlength=table.size)
        touched = table.lengths > 0
        assert np.allclose(per_journey[touched], 1.0, rtol=1e-9)
        assert (weights >= 0).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from("abcd"), min_size=1, max_size=5),
                          st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12))
def test_interchangeable_channels_get_equal_shapley_credit(rows):
    # add the mirror image of every journey with a and b swapped: a and b are symmetric
    swap = {"a": "b", "b": "a"}
    mirrored = rows + [([swap.get(c, c) for c in p], cv, nc) for p, cv, nc in rows]
    table = from_paths([p for p, _, _ in mirrored], [c for _, c, _ in mirrored],
                       [n for _, _, n in mirrored], [c for _, c, _ in mirrored])
    result, _ = attribute(table, ("shapley", "markov"))
    for model in ("shapley", "markov"):
        got = credits(result, model)
        assert got.get("a", 0.0) == pytest.approx(got.get("b", 0.0), rel=1e-9, abs=1e-9)


def test_null_player_gets_nothing():
    rng = np.random.default_rng(3)
    base = [["a"], ["b"], ["c"], ["a", "b"], ["a", "c"], ["b", "c"], ["a", "b", "c"]]
    paths_, conv, non = [], [], []
    for path in base:
        c, n = int(rng.integers(1, 20)), int(rng.integers(1, 20))
        # z joins every journey without changing its conversion rate
        for p in (path, [*path, "z"]):
            paths_.append(p)
            conv.append(c)
            non.append(n)
    table = from_paths(paths_, conv, non, conv)
    result, _ = attribute(table, ("shapley",))
    assert credits(result, "shapley").get("z", 0.0) == pytest.approx(0.0, abs=1e-12)


def test_sampled_shapley_agrees_with_exact_within_its_error():
    rng = np.random.default_rng(11)
    n = 9
    masks = np.arange(1, 1 << n, dtype=np.uint64)
    value = shapley.ValueFunction(masks, rng.random(len(masks)))
    channels = np.arange(n)
    exact = shapley.exact(channels[None, :], value)[0]
    estimate, se = shapley.sampled(channels, value, 4000, rng)
    assert (np.abs(estimate - exact) <= 4 * se + 1e-12).all()
    assert se.max() < 0.05


def test_exact_shapley_matches_the_permutation_definition():
    rng = np.random.default_rng(5)
    n = 5
    masks = np.arange(1, 1 << n, dtype=np.uint64)
    value = shapley.ValueFunction(masks, rng.random(len(masks)))
    phi = np.zeros(n)
    orders = list(permutations(range(n)))
    for order in orders:
        mask = 0
        for i in order:
            before = value(np.array([mask], np.uint64))[0]
            mask |= 1 << i
            phi[i] += value(np.array([mask], np.uint64))[0] - before
    exact = shapley.exact(np.arange(n)[None, :], value)[0]
    assert exact == pytest.approx(phi / len(orders), abs=1e-12)


# --- Markov: exact solve against a Monte-Carlo walk of the same chain -------------------

def random_paths(rng, n, channels, max_len=6):
    names = [f"ch{i}" for i in range(channels)]
    paths_ = [list(rng.choice(names, size=rng.integers(1, max_len + 1))) for _ in range(n)]
    conv = rng.integers(0, 2, size=n)
    return paths_, conv, 1 - conv


@pytest.mark.parametrize("order", [1, 2])
def test_markov_exact_matches_simulated_walks(order):
    rng = np.random.default_rng(order)
    paths_, conv, non = random_paths(rng, 400, 5)
    table = from_paths(paths_, conv, non, conv)
    chain = markov.build_chain(table, order)
    walks = 200_000
    exact = markov.conversion_probability(chain)
    simulated = markov.simulate_conversion_probability(chain, walks, rng)
    sigma = math.sqrt(exact * (1 - exact) / walks)
    assert abs(simulated - exact) < 5 * sigma
    for channel in range(len(table.channels)):
        removed = np.array([channel in s for s in chain.state_channels])
        p_exact = markov.conversion_probability(chain, removed)
        p_sim = markov.simulate_conversion_probability(chain, walks, rng, removed)
        assert abs(p_sim - p_exact) < 5 * math.sqrt(max(p_exact * (1 - p_exact), 1e-6) / walks)


# --- agreement with channelattribution ----------------------------------------------

def test_rule_based_models_agree_exactly_with_channelattribution():
    import ChannelAttribution as ca

    rng = np.random.default_rng(8)
    paths_, conv, _ = random_paths(rng, 300, 7)
    conv = rng.integers(0, 4, size=len(paths_))
    value = conv * 12.5
    frame = pd.DataFrame({"path": [" > ".join(p) for p in paths_], "conv": conv,
                          "value": value})
    frame = frame[frame.conv > 0]
    peer = ca.heuristic_models(frame, "path", "conv", var_value="value", flg_pro=False) \
        if "flg_pro" in ca.heuristic_models.__code__.co_varnames else \
        ca.heuristic_models(frame, "path", "conv", var_value="value")
    table = from_paths([p.split(" > ") for p in frame.path], frame.conv, np.zeros(len(frame)),
                       frame.value)
    ours, _ = attribute(table, ("first_click", "last_click", "linear"))
    for model, column in (("first_click", "first_touch"), ("last_click", "last_touch"),
                          ("linear", "linear_touch")):
        mine = ours[ours.model == model].set_index("channel")
        theirs = peer.set_index("channel_name")
        for channel in theirs.index:
            expected = theirs.loc[channel, f"{column}_conversions"]
            got = mine.conversions.get(channel, 0.0)
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-9), (model, channel)
            assert mine.revenue.get(channel, 0.0) == pytest.approx(
                theirs.loc[channel, f"{column}_value"], rel=1e-9, abs=1e-9)


def test_path_transforms():
    table = from_paths([["a", "a", "b", "a"]], [1], [0], [0])
    assert apply_transform(table, "collapse").paths() == [("a", "b", "a")]
    assert apply_transform(table, "drop_repeats").paths() == [("a", "b")]
    assert apply_transform(table, "unique").paths() == [("b", "a")]
    with pytest.raises(ValueError, match="unknown path transform"):
        apply_transform(table, "shuffle")
