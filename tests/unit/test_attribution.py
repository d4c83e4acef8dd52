import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.records import UNATTRIBUTED, Conversion, Touchpoint
from udfs.attribution.credits import credit_journey
from udfs.attribution.models import validate_models
from udfs.journeys.rules import ConvertedJourney


def journey(channels, revenue=90.0):
    touches = tuple(Touchpoint("u", i, c, "", "t", "s") for i, c in enumerate(channels))
    return ConvertedJourney(Conversion("u", 100, "o1", revenue, "USD", "t", "s"), touches)


def by_model(credits):
    out = {}
    for c in credits:
        out.setdefault(c.model, []).append((c.touch_index, c.channel, c.credit, c.revenue))
    return out


def test_last_click_gives_everything_to_the_last_touch():
    got = by_model(credit_journey(journey(["email", "display", "search"]), ["last_click"]))
    assert got == {"last_click": [(2, "search", 1.0, 90.0)]}


def test_linear_splits_equally_per_occurrence():
    got = by_model(credit_journey(journey(["email", "search", "email"]), ["linear"]))
    assert [(i, c) for i, c, _, _ in got["linear"]] == [(0, "email"), (1, "search"), (2, "email")]
    assert all(math.isclose(credit, 1 / 3) for _, _, credit, _ in got["linear"])
    assert all(math.isclose(revenue, 30.0) for _, _, _, revenue in got["linear"])


def test_conversion_without_touches_goes_to_unattributed():
    got = by_model(credit_journey(journey([]), ["last_click", "linear"]))
    for model in ("last_click", "linear"):
        assert got[model] == [(0, UNATTRIBUTED, 1.0, 90.0)]


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="unknown attribution model.*nope"):
        validate_models(["linear", "nope"])


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=12),
       st.floats(min_value=0, max_value=1e7, allow_nan=False))
def test_credits_are_conservative(channels, revenue):
    credits = credit_journey(journey(channels, revenue), ["last_click", "linear"])
    for model in ("last_click", "linear"):
        rows = [c for c in credits if c.model == model]
        assert math.isclose(sum(c.credit for c in rows), 1.0, rel_tol=1e-9)
        assert math.isclose(sum(c.revenue for c in rows), revenue, rel_tol=1e-9, abs_tol=1e-9)


def test_streaming_credits_equal_the_batch_models():
    from udfs.attribution.models import touch_weights
    from udfs.journeys.table import from_paths

    j = journey(["email", "search", "email", "display", "search"])
    models = ["first_click", "position_based", "shapley_simplified"]
    credits = credit_journey(j, models)
    table = from_paths([[t.channel for t in j.touches]], [1], [0], [90.0])
    for model in models:
        expected = touch_weights(table, model)
        got = {c.touch_index: c.credit for c in credits if c.model == model}
        assert [got.get(i, 0.0) for i in range(5)] == pytest.approx(expected, rel=1e-12)


def test_data_driven_models_need_the_stream_counts_not_one_journey():
    assert validate_models(["linear", "shapley"]) == ("linear", "shapley")
    with pytest.raises(ValueError, match="shapley needs counts over many journeys"):
        credit_journey(journey(["email"]), ["shapley"])
    with pytest.raises(ValueError, match="unknown attribution model"):
        validate_models(["lienar"])


def test_many_journeys_in_one_table_get_the_credits_each_gets_alone():
    import random

    from udfs.attribution.credits import credit_journeys
    from udfs.attribution.models import PER_CONVERSION_MODELS

    rng = random.Random(4)
    journeys = [journey([rng.choice(["email", "search", "display", "social"])
                         for _ in range(rng.randint(0, 6))], revenue=rng.uniform(1, 99))
                for _ in range(60)]
    together = credit_journeys(journeys, PER_CONVERSION_MODELS)
    alone = [c for j in journeys for c in credit_journeys([j], PER_CONVERSION_MODELS)]
    assert sorted(together) == sorted(alone)  # exactly: same numbers, not just close
    assert {c.channel for c in together} >= {"(unattributed)", "email"}


def test_column_wise_rows_equal_rows_built_one_journey_at_a_time():
    import random

    import numpy as np

    from udfs.attribution.credits import as_credits, credit_rows, credits_from_weights

    rng = random.Random(9)
    journeys = [ConvertedJourney(
        Conversion(f"u{k}", 1000 + k, f"o{k}", rng.uniform(1, 99), "EUR", "t", "s"),
        tuple(Touchpoint(f"u{k}", i, rng.choice(["email", "search"]), f"c{i % 2}", "t", "s")
              for i in range(rng.randint(0, 5))), rng.choice(["new", "repeat"]))
        for k in range(40)]
    # weights with zeros in them (left out) and arbitrary values (carried as they are)
    weights = {model: [[rng.choice([0.0, 0.25, rng.random()]) for _ in j.touches]
                       for j in journeys] for model in ("m1", "m2")}
    flat = [(model, np.array([w for per in weights[model] for w in per]))
            for model in weights]
    expected = [credit for model in weights
                for journey, per in zip(journeys, weights[model], strict=True)
                for credit in credits_from_weights(journey, model, per)]
    got = as_credits(credit_rows(journeys, flat))
    assert got == expected
    assert {c.channel for c in got} >= {UNATTRIBUTED, "email", "search"}
    assert any(c.credit == 0.25 for c in got) and all(c.credit != 0.0 for c in got)
