"""GPU pool pressure: the three-factor score, thresholds, cool-down, validation, many pools."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from udfs.control.pool_pressure import (
    INPUT_COLUMNS,
    ScalingPolicy,
    decide,
    pool_decisions,
    pressure,
    pressures,
    scaling_decision,
)

MINUTE_MS = 60_000


def test_the_score_weighs_util_memory_and_queue():
    assert pressure(95, 0, 80, 10, 10) == pytest.approx(1.0)
    assert pressure(0, 80, 80, 0, 10) == pytest.approx(0.0)
    # 0.4 x 50/95 + 0.35 x (1 - 20/80) + 0.25 x 4/8
    assert pressure(50, 20, 80, 4, 8) == pytest.approx(0.4 * 50 / 95 + 0.35 * 0.75 + 0.125)
    # util above 95 % and a queue beyond capacity saturate at their weight
    assert pressure(100, 40, 80, 100, 8) == pytest.approx(0.4 + 0.175 + 0.25)


def test_thresholds_are_strict():
    assert decide(0.81, 0, None).action == "scale_out"
    assert decide(0.8, 0, None).action == "hold"
    assert decide(0.3, 0, None).action == "hold"
    assert decide(0.29, 0, None).action == "scale_in"
    assert decide(0.5, 0, None).reason.startswith("pressure 0.500 within")


def test_cool_down_of_five_minutes_since_the_last_action():
    last = 10 * MINUTE_MS
    held = decide(0.95, last + 4 * MINUTE_MS, last)
    assert held.action == "hold" and "cooling down: 60 s left" in held.reason
    assert decide(0.95, last + 5 * MINUTE_MS, last).action == "scale_out"  # exactly 5 min
    assert decide(0.1, last + 299_999, last).action == "hold"
    assert decide(0.95, last - MINUTE_MS, last).action == "hold"  # clock skew: still cooling
    assert decide(0.95, last + MINUTE_MS, last, ScalingPolicy(cooldown_ms=0)).action \
        == "scale_out"


def test_one_pool_decision():
    result = scaling_decision(99, 4, 80, 12, 8, now_ms=0, last_action_ms=None)
    assert result.action == "scale_out" and result.pressure > 0.8


@pytest.mark.parametrize("reading, problem", [
    ((101, 0, 80, 0, 8), "util_pct must lie in 0..100"),
    ((-1, 0, 80, 0, 8), "util_pct"),
    ((50, -1, 80, 0, 8), "free_mem <= total_mem"),
    ((50, 90, 80, 0, 8), "free_mem <= total_mem"),
    ((50, 0, 0, 0, 8), "total_mem > 0"),
    ((50, 0, 80, -1, 8), "queue_depth"),
    ((50, 0, 80, 1, 0), "capacity"),
    ((math.nan, 0, 80, 1, 8), "util_pct is NaN"),
    ((50, 0, 80, math.nan, 8), "queue_depth is NaN"),
    (("50", 0, 80, 1, 8), "util_pct must be a number"),
])
def test_invalid_readings_are_errors(reading, problem):
    with pytest.raises(ValueError, match=problem):
        pressure(*reading)


def test_bad_policies():
    with pytest.raises(ValueError):
        ScalingPolicy(scale_out_above=0.3, scale_in_below=0.8)
    with pytest.raises(ValueError):
        ScalingPolicy(cooldown_ms=-1)


READINGS = pd.DataFrame([
    ("hot", 99.0, 4.0, 80.0, 12.0, 8.0),
    ("cold", 5.0, 70.0, 80.0, 0.0, 8.0),
    ("busy", 60.0, 30.0, 80.0, 2.0, 8.0),
    ("hot_cooling", 99.0, 4.0, 80.0, 12.0, 8.0),
], columns=INPUT_COLUMNS)


def test_many_pools_match_the_scalar_function():
    now = 100 * MINUTE_MS
    result = pool_decisions(READINGS, now, {"hot_cooling": now - MINUTE_MS, "cold": 0})
    assert result.action.tolist() == ["scale_out", "scale_in", "hold", "hold"]
    for row, decision in zip(READINGS.itertuples(index=False), result.itertuples(),
                             strict=True):
        assert decision.pressure == pytest.approx(pressure(*row[1:]))


def test_an_invalid_pool_raises_or_holds():
    broken = pd.concat([READINGS, pd.DataFrame([("blind", math.nan, 4.0, 80.0, 0.0, 8.0)],
                                               columns=INPUT_COLUMNS)], ignore_index=True)
    assert math.isnan(pressures(broken).iloc[-1])
    with pytest.raises(ValueError, match="pool blind: util_pct is NaN"):
        pool_decisions(broken, 0, {})
    held = pool_decisions(broken, 0, {}, errors="hold")
    assert held.action.iloc[-1] == "hold" and "invalid reading" in held.reason.iloc[-1]
    assert held.action.iloc[0] == "scale_out"  # the other pools still decide
