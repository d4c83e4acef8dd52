"""Data-driven models on the stream: counts per path, refitted per period."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import Conversion, Touchpoint
from udfs.attribution import models
from udfs.attribution.data_driven import credit_by_period, period_end
from udfs.journeys.rules import (
    DAY_MS,
    ConvertedJourney,
    JourneyConfig,
    NonConvertingJourney,
    closed_journeys_of,
)
from udfs.journeys.table import from_paths

EVER = 10**15  # a refit period longer than any data: one fit over everything


def _touches(user: str, channels: str, ts: int = 0) -> tuple[Touchpoint, ...]:
    return tuple(Touchpoint(user, ts + i, c, f"camp-{c}", "", "") for i, c in enumerate(channels))


def _journeys(channels: str, conversions: int, non_conversions: int, ts: int = 1000) -> list:
    out: list = []
    for i in range(conversions):
        user = f"{channels}-c{i}"
        out.append(ConvertedJourney(Conversion(user, ts, f"o-{user}", 10.0, "USD", "", ""),
                                    _touches(user, channels, ts - 10), "new"))
    for i in range(non_conversions):
        out.append(NonConvertingJourney(f"{channels}-n{i}", _touches("x", channels), ts))
    return out


def test_design_worked_check_for_shapley_through_the_stream_counts():
    journeys = _journeys("A", 1, 9) + _journeys("B", 2, 8) + _journeys("C", 0, 0) \
        + [j for j in _journeys("AB", 3, 3)]
    credits = credit_by_period(journeys, ["shapley"], EVER)
    ab = [c for c in credits if c.order_id.startswith("o-AB")]
    by_channel: dict[str, float] = {}
    for c in ab:
        by_channel[c.channel] = by_channel.get(c.channel, 0.0) + c.credit
    assert by_channel["A"] == pytest.approx(3 * 0.4) and by_channel["B"] == pytest.approx(3 * 0.6)
    assert sum(c.revenue for c in ab) == pytest.approx(30.0)


def test_design_worked_check_for_markov_through_the_stream_counts():
    journeys = [j for j in _journeys("ab", 3, 1)] + _journeys("ac", 1, 1)
    credits = credit_by_period(journeys, ["markov"], EVER)
    total: dict[str, float] = {}
    for c in credits:
        total[c.channel] = total.get(c.channel, 0.0) + c.credit
    assert total == pytest.approx({"a": 2.514285714285714, "b": 1.2857142857142856, "c": 0.2})


def test_a_conversion_is_credited_with_the_counts_of_its_period_only():
    early = _journeys("AB", 1, 0, ts=1000)
    # later evidence that B alone converts well must not reach the earlier conversion
    late = _journeys("B", 5, 0, ts=5000) + _journeys("A", 0, 5, ts=5000)
    credits = credit_by_period(early + late, ["shapley"], period_ms=2000)
    first = {c.channel: c.credit for c in credits if c.conversion_ts_ms == 1000}
    assert first == pytest.approx({"A": 0.5, "B": 0.5})  # only AB seen: symmetric
    assert period_end(1999, 2000) == 1999 and period_end(2000, 2000) == 3999
    # with one period for everything the same conversion leans to B
    whole = {c.channel: c.credit for c in credit_by_period(early + late, ["shapley"], EVER)
             if c.conversion_ts_ms == 1000}
    assert whole["B"] > 0.9


def test_one_period_over_everything_equals_the_batch_models():
    rng = np.random.default_rng(11)
    rows, events_by_user = [], {}
    for user in range(150):
        t, user_events = 0, []
        for k in range(int(rng.integers(1, 9))):
            t += int(rng.integers(0, 25 * DAY_MS))
            if rng.random() < 0.25:
                event = Conversion(f"u{user}", t, f"u{user}-{k}", 20.0, "USD", "", "")
                rows.append((event.user_id, t, True, "", "", 20.0))
            else:
                channel = str(rng.choice(list("abcde")))
                event = Touchpoint(f"u{user}", t, channel, "", "", "")
                rows.append((event.user_id, t, False, channel, "", 0.0))
            user_events.append(event)
        events_by_user[f"u{user}"] = user_events
    config = JourneyConfig(30)
    closed = [j for events in events_by_user.values() for j in closed_journeys_of(events, config)]
    assert any(isinstance(j, NonConvertingJourney) for j in closed)
    stream = credit_by_period(closed, ["shapley", "markov"], EVER)
    # the same journeys as one batch of path summaries, fitted once
    converted = [isinstance(j, ConvertedJourney) for j in closed]
    table = from_paths([[t.channel for t in j.touches] for j in closed],
                       [float(c) for c in converted], [float(not c) for c in converted],
                       [20.0 if c else 0.0 for c in converted])
    batch, _ = models.attribute(table, ("shapley", "markov"))
    for model in ("shapley", "markov"):
        got: dict[str, float] = {}
        for c in stream:
            if c.model == model:
                got[c.channel] = got.get(c.channel, 0.0) + c.credit
        expected = batch[batch.model == model].set_index("channel").conversions.to_dict()
        assert got == pytest.approx(expected, rel=1e-9), model


def test_a_fit_indexes_new_paths_only_and_gives_the_tables_and_weights_of_a_fresh_build():
    """Refits reuse the codes of the paths already indexed; the table and every weight must
    equal a build from all the path tuples, as channels appear that sort before the old
    ones (their codes shift), counts grow on old paths, and paths arrive through the dict
    itself (as the backfill adds them) or a counts dict restored from state."""
    from udfs.attribution.data_driven import PathCounts
    from udfs.journeys.table import from_paths

    rng = np.random.default_rng(7)
    alphabet = ["m", "k", "z", "b", "a"]  # later rounds bring names that sort first
    counts = PathCounts()
    for round_ in range(1, 6):
        names = alphabet[:round_]
        for _ in range(40):
            path = tuple(rng.choice(names, size=rng.integers(0, 5)))
            if rng.random() < 0.5:
                counts.add_path(path, conversions=float(rng.integers(0, 3)),
                                non_conversions=float(rng.integers(0, 3)))
            else:
                cell = counts.counts.setdefault(path, [0.0, 0.0])
                cell[0] += 1.0
        restored = PathCounts({path: list(cell) for path, cell in counts.counts.items()})
        paths = list(counts.counts)
        fresh = from_paths(paths, [c[0] for c in counts.counts.values()],
                           [c[1] for c in counts.counts.values()], np.zeros(len(paths)))
        for candidate in (counts, restored):
            fitted = candidate.fit(("shapley", "markov"))
            table = candidate._index.table(candidate.counts)
            assert table.channels == fresh.channels
            for name in ("offsets", "touch_channel", "conversions", "non_conversions"):
                np.testing.assert_array_equal(getattr(table, name), getattr(fresh, name))
            assert [fitted.rows[p] for p in paths] == list(range(len(paths)))
            for model in ("shapley", "markov"):
                np.testing.assert_array_equal(fitted.weights[model],
                                              models.touch_weights(fresh, model))
