"""Control rules: validation with key paths, when each rule kind fires, limits (per day,
weekly compounding cap, cool-down), idempotent decision ids, verification."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from udfs.control.rules import (
    ActionRecord,
    RuleError,
    evaluate,
    parse_rule,
    parse_rules,
)
from udfs.control.verification import observed_after, verify
from udfs.periods import DAY_MS

BUDGET = {"name": "cut_low_roi",
          "when": {"metric": "roi", "dimension": "campaign", "comparison": "<",
                   "threshold": 1.0, "for_days": 3, "model": "last_click"},
          "then": {"action": "budget_change", "percent": -20},
          "limits": {"max_per_day": 1, "max_change_per_week_percent": 50},
          "settle_s": 2 * 86_400,
          "verify": {"metric": "roi", "min_change_percent": 10}}
SCALE = {"name": "scale_out_hot_pool",
         "when": {"metric": "pressure", "dimension": "pool", "comparison": ">",
                  "threshold": 0.8},
         "then": {"action": "scale", "nodes": 1},
         "limits": {"cooldown_s": 300},
         "settle_s": 600,
         "verify": {"below": 0.8}}
ANOMALY = {"name": "roi_anomaly",
           "when": {"metric": "roi", "dimension": "channel", "model": "last_click",
                    "anomaly": {"direction": "drop"}},
           "then": {"action": "notify", "message": "ROI drop"}}
RULES = parse_rules({"rules": [BUDGET, SCALE, ANOMALY]})


def ms(day: str, hour: int = 12) -> int:
    return int(datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC).timestamp() * 1000)


def campaign_rows(roi_by_day: dict[str, list[float]], end: str = "2024-05-10") -> pd.DataFrame:
    rows = []
    for key, series in roi_by_day.items():
        days = pd.date_range(end=end, periods=len(series), freq="D").strftime("%Y-%m-%d")
        rows += [("last_click", day, "campaign", key, 10.0, 10 * roi, 10.0, 0.0, roi)
                 for day, roi in zip(days, series, strict=True)]
    return pd.DataFrame(rows, columns=["model", "day", "dimension", "key", "conversions",
                                       "revenue", "ad_spend", "compute_cost", "roi"])


def with_change(raw: dict, path: str, value: object) -> dict:
    """A copy of a rule with the value at a dotted path replaced (or deleted: ...)."""
    changed = copy.deepcopy(raw)
    *parents, last = path.split(".")
    node = changed
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return changed


@pytest.mark.parametrize("path, value, named, problem", [
    ("when.metrc", "roi", "rules[0].when.metrc", "unknown key"),
    ("when.metric", "profit", "rules[0].when.metric", "expected one of"),
    ("when.threshold", "1.0", "rules[0].when.threshold", "expected a number"),
    ("when.threshold", True, "rules[0].when.threshold", "expected a number"),
    ("when.for_days", 2.5, "rules[0].when.for_days", "expected an integer"),
    ("when.for_days", 0, "rules[0].when.for_days", "must lie in"),
    ("when.comparison", ..., "rules[0].when.comparison", "required"),
    ("then.percent", -120, "rules[0].then.percent", "must lie in"),
    ("then.percent", 0, "rules[0].then.percent", "changes nothing"),
    ("then.nodes", 1, "rules[0].then.nodes", "unknown key"),
    ("then.action", "pause", "rules[0].then.action", "expected one of"),
    ("limits.max_per_day", 0, "rules[0].limits.max_per_day", "must lie in"),
    ("limits.cooldown", 300, "rules[0].limits.cooldown", "unknown key"),
    ("settle_s", -1, "rules[0].settle_s", "must lie in"),
    ("verify.min_change_percent", "10%", "rules[0].verify.min_change_percent", "a number"),
    ("verify.metric", "pressure", "rules[0].verify.metric", "expected one of"),
    ("when", [], "rules[0].when", "expected a mapping"),
    ("name", "", "rules[0].name", "non-empty"),
    ("when.dimension", "pool", "rules[0].when.dimension", "not measured per pool"),
    ("when.anomaly", {"direction": "down"}, "rules[0].when", "either comparison"),
])
def test_validation_errors_name_the_key_path(path, value, named, problem):
    with pytest.raises(RuleError, match=problem) as error:
        parse_rules({"rules": [with_change(BUDGET, path, value)]})
    assert error.value.path == named
    assert str(error.value).startswith(f"{named}: ")


def test_cross_field_and_nested_errors():
    with pytest.raises(RuleError) as error:
        parse_rules({"rules": [SCALE, with_change(ANOMALY, "when.anomaly.window_days", "28")]})
    assert error.value.path == "rules[1].when.anomaly.window_days"
    with pytest.raises(RuleError) as error:
        parse_rule(with_change(ANOMALY, "when.anomaly.min_history", 40), "r")
    assert error.value.path == "r.when.anomaly" and "min_history" in str(error.value)
    with pytest.raises(RuleError, match="scale acts on a pool") as error:
        parse_rule(with_change(BUDGET, "then", {"action": "scale", "nodes": 1}), "r")
    with pytest.raises(RuleError, match="only for budget_change") as error:
        parse_rule(with_change(SCALE, "limits.max_change_per_week_percent", 50), "r")
    with pytest.raises(RuleError, match="duplicate") as error:
        parse_rules({"rules": [BUDGET, BUDGET]})
    assert error.value.path == "rules[1].name"
    with pytest.raises(RuleError) as error:
        parse_rules({"rulez": []})
    assert error.value.path == "rulez"


def test_the_parsed_model():
    budget, scale, anomaly = RULES
    assert budget.when.threshold == 1.0 and budget.then.percent == -20.0
    assert budget.limits.max_change_per_week_percent == 50
    assert scale.verify is not None and scale.verify.metric == "pressure"
    assert anomaly.when.anomaly is not None and anomaly.when.anomaly.direction == "drop"
    assert anomaly.limits.max_per_day is None and anomaly.verify is None


NOW = ms("2024-05-11")


def budget_decisions(roi_by_day, history=(), now=NOW):
    return evaluate(RULES[:1], campaign_rows(roi_by_day), {}, list(history), now)


def test_roi_below_one_for_three_days_fires_exactly():
    decisions = budget_decisions({"three_low": [1.2, 0.9, 0.8, 0.7],
                                  "two_low": [0.9, 1.2, 0.8, 0.7],  # 2 days, not 3
                                  "exactly_one": [0.5, 0.5, 1.0, 0.5]})  # 1.0 is not < 1.0
    assert [d.target for d in decisions] == ["three_low"]
    (decision,) = decisions
    assert decision.action == "budget_change" and not decision.blocked
    assert decision.parameters == {"percent": -20.0, "requested_percent": -20.0}
    assert decision.period == "2024-05-10" and "0.9, 0.8, 0.7" in decision.reason


def test_a_missing_or_nan_day_breaks_the_streak():
    rows = campaign_rows({"c": [0.5, 0.5, 0.5, 0.5]})
    assert evaluate(RULES[:1], rows.drop(index=2), {}, [], ms("2024-05-11")) == []
    rows.loc[3, "roi"] = np.nan  # a day without cost
    assert evaluate(RULES[:1], rows, {}, [], ms("2024-05-11")) == []


def test_another_model_or_an_unnamed_model_among_many():
    rows = campaign_rows({"c": [0.5] * 3})
    assert evaluate(RULES[:1], rows.assign(model="markov"), {}, [], ms("2024-05-11")) == []
    both = pd.concat([rows, rows.assign(model="markov")])
    unnamed = parse_rule(with_change(BUDGET, "when.model", ...))
    with pytest.raises(ValueError, match="name one in when.model"):
        evaluate([unnamed], both, {}, [], ms("2024-05-11"))


def test_decision_ids_are_stable_across_re_evaluation():
    low = {"c1": [0.5] * 3, "c2": [0.6] * 3}
    first = budget_decisions(low, now=ms("2024-05-11", 8))
    again = budget_decisions(low, now=ms("2024-05-11", 9))
    assert [d.decision_id for d in first] == [d.decision_id for d in again]
    assert len({d.decision_id for d in first}) == 2
    next_day = evaluate(RULES[:1], campaign_rows({"c1": [0.5] * 4}, end="2024-05-11"), {}, [],
                        ms("2024-05-12"))
    assert next_day[0].decision_id != first[0].decision_id


def cut(day: str, change: float = -20.0, target: str = "c") -> ActionRecord:
    return ActionRecord("cut_low_roi", target, "budget_change", ms(day, 6), change)


def test_a_second_cut_the_same_day_is_blocked():
    (decision,) = budget_decisions({"c": [0.5] * 3}, [cut("2024-05-11")])
    assert decision.blocked and decision.blocked_by == "max_per_day"
    (other,) = budget_decisions({"c": [0.5] * 3}, [cut("2024-05-11", target="d")])
    assert not other.blocked  # another campaign's cut does not count
    (yesterday,) = budget_decisions({"c": [0.5] * 3}, [cut("2024-05-10")])
    assert not yesterday.blocked


def test_the_weekly_cap_compounds_clips_then_blocks():
    three = [cut("2024-05-08"), cut("2024-05-09"), cut("2024-05-10")]  # 0.8^3 = 0.512
    (fourth,) = budget_decisions({"c": [0.5] * 3}, three)
    assert not fourth.blocked
    assert fourth.parameters["percent"] == pytest.approx((0.5 / 0.512 - 1) * 100)  # -2.34 %
    assert fourth.parameters["requested_percent"] == -20
    clipped = cut("2024-05-11", fourth.parameters["percent"])
    (fifth,) = budget_decisions({"c": [0.5] * 3}, [*three, clipped], now=ms("2024-05-12"))
    assert fifth.blocked and fifth.blocked_by == "max_change_per_week_percent"
    # a week later the first cut no longer counts: 0.8^2 x 0.977 = 0.625 -> -20 % is -20 %
    (later,) = budget_decisions({"c": [0.5] * 3}, [*three, clipped], now=ms("2024-05-15", 7))
    assert not later.blocked and later.parameters["percent"] == pytest.approx(-20.0)


def test_pool_pressure_scales_out_with_a_cool_down():
    now = ms("2024-05-11")
    pools = {"a100": 0.85, "h100": 0.8, "l40s": 0.2}  # 0.8 is not > 0.8
    (decision,) = evaluate(RULES[1:2], pd.DataFrame(), pools, [], now)
    assert (decision.target, decision.action, decision.parameters) == ("a100", "scale",
                                                                      {"nodes": 1})
    recent = ActionRecord("scale_out_hot_pool", "a100", "scale", now - 240_000, 1)
    (cooling,) = evaluate(RULES[1:2], pd.DataFrame(), pools, [recent], now)
    assert cooling.blocked and cooling.blocked_by == "cooldown_s"
    old = recent._replace(time_ms=now - 300_000)
    assert not evaluate(RULES[1:2], pd.DataFrame(), pools, [old], now)[0].blocked
    # the same id within one cool-down window, a new one in the next
    same = evaluate(RULES[1:2], pd.DataFrame(), pools, [], now + 1000)[0]
    following = evaluate(RULES[1:2], pd.DataFrame(), pools, [], now + 300_000)[0]
    assert same.decision_id == decision.decision_id != following.decision_id


def channel_rows(last_roi: float) -> pd.DataFrame:
    noise = np.random.default_rng(2).standard_normal(40)
    series = list(2.0 * (1 + 0.05 * noise[:-1])) + [last_roi]
    return campaign_rows({"search": series}).assign(dimension="channel")


def test_roi_anomaly_on_a_channel_notifies():
    (decision,) = evaluate(RULES[2:], channel_rows(1.0), {}, [], ms("2024-05-11"))
    assert decision.action == "notify" and decision.parameters == {"message": "ROI drop"}
    assert "anomalous" in decision.reason
    assert evaluate(RULES[2:], channel_rows(1.95), {}, [], ms("2024-05-11")) == []


def test_verification_after_settling():
    budget, scale, _ = RULES
    executed = ms("2024-05-11")
    settled = executed + 2 * DAY_MS
    assert verify(budget, executed, 0.8, 0.92, settled).status == "success"  # +15 %
    failed = verify(budget, executed, 0.8, 0.84, settled)  # +5 % < +10 %
    assert failed.status == "failure" and failed.change_percent == pytest.approx(5.0)
    assert "short of 10.0 %" in failed.reason
    assert verify(budget, executed, 0.8, 0.92, settled - 1).status == "pending"
    assert verify(budget, executed, 0.8, float("nan"), settled).status == "no_data"
    assert verify(scale, executed, 0.9, 0.7, executed + 600_000).status == "success"
    assert verify(scale, executed, 0.9, 0.85, executed + 600_000).status == "failure"


def test_observed_after_reads_the_days_after_execution():
    budget, scale, _ = RULES
    rows = campaign_rows({"c": [0.5, 0.5, 1.0, 2.0]})  # to 2024-05-10
    executed = ms("2024-05-08")
    assert observed_after(budget, "c", rows, {}, executed) == pytest.approx(1.5)  # 30 / 20
    assert np.isnan(observed_after(budget, "c", rows, {}, ms("2024-05-10")))
    assert observed_after(scale, "a100", pd.DataFrame(), {"a100": 0.6}, executed) == 0.6


def test_decisions_of_one_step_respect_each_others_limits():
    """Two rules cutting the same campaign in one evaluation: the second sees the first's
    cut (without it, both would pass the weekly cap on the same empty history)."""
    deep = parse_rules({"rules": [
        dict(BUDGET, name="cut_deep", then={"action": "budget_change", "percent": -40}),
        dict(BUDGET, name="cut_more", then={"action": "budget_change", "percent": -40})]})
    first, second = evaluate(deep, campaign_rows({"c": [0.5] * 3}), {}, [], NOW)
    assert first.parameters["percent"] == pytest.approx(-40.0)
    # 0.6 x (1 + p) = 0.5 at the 50 % weekly cap: -16.7 %, not another -40 %
    assert second.rule == "cut_more" and not second.blocked
    assert second.parameters["percent"] == pytest.approx((0.5 / 0.6 - 1) * 100)
