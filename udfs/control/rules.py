"""Control rules: a validated model built from plain mappings (the service parses the YAML),
an evaluator that turns metrics into decisions, and a verifier of executed actions.

A rule: `when` (a metric of a dimension against a threshold on each of the last `for_days`
data days, or an anomaly by udfs.control.anomaly), `then` (budget_change by percent, scale by nodes,
notify), `limits`, `settle_s`, `verify`. Invalid keys, types or ranges raise RuleError naming
the key path (`rules[0].when.metric`). decision_id hashes rule, target and period (the data
day evaluated; for pools the cool-down window of now_ms): re-evaluation yields the same ids.

Limits, in this order, against the history of executed actions:
- cooldown_s: since the last action of the same type on the same target (any rule);
- max_per_day: actions of this rule on this target in the UTC day of now_ms;
- max_change_per_week_percent: budget changes of the target (any rule) in the 7 days up to
  now_ms compound (-20 % three times is 0.8^3 = 0.512: -48.8 %). A change that would pass
  the cap is CLIPPED to what is left (the 4th -20 % becomes -2.34 %, ending at exactly -50 %;
  parameters keep requested_percent) and BLOCKED once nothing is left.
Blocked decisions are returned too (blocked_by names the limit), for the service to log.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd

from udfs.control.anomaly import AnomalyConfig, detect_anomalies
from udfs.periods import DAY_MS, day_of

DAILY_METRICS = ("roi", "revenue", "conversions", "ad_spend", "compute_cost")
POOL_METRICS = ("pressure",)
DIMENSIONS = ("channel", "campaign", "stage", "pool")
COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
ACTIONS = ("budget_change", "scale", "notify")
WEEK_MS = 7 * DAY_MS
_EPSILON = 1e-9  # cap headroom below this is none (float noise of compounded factors)


class RuleError(ValueError):
    """An invalid rule; `path` is the key path of the offending value."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


@dataclass(frozen=True)
class Condition:
    metric: str
    dimension: str
    comparison: str | None = None  # with threshold, or else anomaly
    threshold: float | None = None
    for_days: int = 1
    anomaly: AnomalyConfig | None = None
    model: str | None = None  # attribution model of the daily rows (None: the only one)


@dataclass(frozen=True)
class Action:
    type: str  # one of ACTIONS
    percent: float | None = None  # budget_change: -20 cuts the daily budget by 20 %
    nodes: int | None = None  # scale: +1 adds a node
    message: str = ""  # notify


@dataclass(frozen=True)
class Limits:
    max_per_day: int | None = None
    max_change_per_week_percent: float | None = None  # magnitude: 50 caps at -50 % / +50 %
    cooldown_s: float | None = None


@dataclass(frozen=True)
class Verify:
    metric: str
    min_change_percent: float | None = None  # signed: +10 wants the metric up by >= 10 %
    above: float | None = None
    below: float | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    when: Condition
    then: Action
    limits: Limits = Limits()
    settle_s: float = 0.0  # how long after execution verification happens
    verify: Verify | None = None

def _number(value: Any, path: str, low: float = -math.inf, high: float = math.inf,
            integer: bool = False) -> float:
    kind, expected = ((int,), "an integer") if integer else ((int, float), "a number")
    if isinstance(value, bool) or not isinstance(value, kind):
        raise RuleError(path, f"expected {expected}, got {value!r}")
    if not math.isfinite(value):
        # NaN or infinity (YAML's .nan, .inf): a limit nothing can cross, or everything
        raise RuleError(path, f"expected a finite number, got {value!r}")
    if not low <= value <= high:
        raise RuleError(path, f"must lie in [{low}, {high}], got {value}")
    return value


def _choice(value: Any, path: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise RuleError(path, f"expected one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _section(raw: Any, path: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    """A mapping with only `allowed` keys and all `required` ones."""
    if not isinstance(raw, Mapping):
        raise RuleError(path, f"expected a mapping, got {type(raw).__name__}")
    prefix = f"{path}." if path else ""
    for key in raw:
        if key not in allowed:
            raise RuleError(f"{prefix}{key}", f"unknown key (allowed: {sorted(allowed)})")
    for key in sorted(required - set(raw)):
        raise RuleError(f"{prefix}{key}", "required")
    return dict(raw)


def _anomaly(raw: Any, path: str) -> AnomalyConfig:
    checks = {"window_days": (3, 366, True), "min_history": (3, 366, True),
              "false_alarm_rate": (0, 0.5, False), "k": (0, 100, False)}
    fields = _section(raw, path, {*checks, "direction", "seasonal"}, set())
    for key, value in fields.items():
        if key in checks:
            _number(value, f"{path}.{key}", *checks[key])
        elif key == "seasonal" and not isinstance(value, bool):
            raise RuleError(f"{path}.seasonal", f"expected true or false, got {value!r}")
    _choice(fields.get("direction", "drop"), f"{path}.direction", ("drop", "rise", "both"))
    try:  # ranges that depend on each other (min_history <= window_days, ...)
        return AnomalyConfig(**fields)
    except ValueError as error:
        raise RuleError(path, str(error)) from error


def _condition(raw: Any, path: str) -> Condition:
    fields = _section(raw, path, {"metric", "dimension", "comparison", "threshold", "for_days",
                                  "anomaly", "model"}, {"metric", "dimension"})
    metric = _choice(fields["metric"], f"{path}.metric", DAILY_METRICS + POOL_METRICS)
    dimension = _choice(fields["dimension"], f"{path}.dimension", DIMENSIONS)
    if (metric in POOL_METRICS) != (dimension == "pool"):
        raise RuleError(f"{path}.dimension", f"metric {metric} is not measured per {dimension}")
    has_threshold = "comparison" in fields or "threshold" in fields
    if has_threshold == ("anomaly" in fields):
        raise RuleError(path, "give either comparison and threshold, or anomaly")
    comparison = threshold = anomaly = None
    if has_threshold:  # both, then
        _section(fields, path, set(fields), {"comparison", "threshold"})
        comparison = _choice(fields["comparison"], f"{path}.comparison", tuple(COMPARISONS))
        threshold = float(_number(fields["threshold"], f"{path}.threshold"))
    else:
        anomaly = _anomaly(fields["anomaly"], f"{path}.anomaly")
    for_days = int(_number(fields.get("for_days", 1), f"{path}.for_days", 1, 90, integer=True))
    if dimension == "pool" and (for_days != 1 or anomaly is not None):
        raise RuleError(path, "pool pressure is a current reading: no for_days, no anomaly")
    model = fields.get("model")
    if model is not None and not (isinstance(model, str) and model):
        raise RuleError(f"{path}.model", f"expected a model name, got {model!r}")
    return Condition(metric, dimension, comparison, threshold, for_days, anomaly, model)


def _action(raw: Any, path: str) -> Action:
    kind = _choice(_section(raw, path, {"action", "percent", "nodes", "message"},
                            {"action"})["action"], f"{path}.action", ACTIONS)
    own = {"budget_change": {"percent"}, "scale": {"nodes"}, "notify": {"message"}}[kind]
    fields = _section(raw, path, own | {"action"}, own - {"message"})
    ranges = {"percent": (-99, 1000, False), "nodes": (-100, 100, True)}
    for key in own & ranges.keys():
        if _number(fields[key], f"{path}.{key}", *ranges[key]) == 0:
            raise RuleError(f"{path}.{key}", "a change of 0 changes nothing")
    if not isinstance(fields.get("message", ""), str):
        raise RuleError(f"{path}.message", f"expected text, got {fields['message']!r}")
    return Action(kind, None if "percent" not in fields else float(fields["percent"]),
                  fields.get("nodes"), fields.get("message", ""))


def _limits(raw: Any, path: str, action: Action) -> Limits:
    fields = _section(raw, path, {"max_per_day", "max_change_per_week_percent", "cooldown_s"},
                      set())
    if "max_change_per_week_percent" in fields and action.type != "budget_change":
        raise RuleError(f"{path}.max_change_per_week_percent", "only for budget_change")
    ranges = {"max_per_day": (1, 1440, True), "cooldown_s": (0, 7 * 86_400, False),
              "max_change_per_week_percent": (_EPSILON, 1000, False)}
    checked: dict[str, Any] = {key: _number(value, f"{path}.{key}", *ranges[key])
                               for key, value in fields.items() if value is not None}
    return Limits(**checked)


def _verify(raw: Any, path: str, default_metric: str) -> Verify:
    fields = _section(raw, path, {"metric", "min_change_percent", "above", "below"}, set())
    checks = {key: float(_number(fields[key], f"{path}.{key}"))
              for key in ("min_change_percent", "above", "below") if key in fields}
    if not checks:
        raise RuleError(path, "give at least one of min_change_percent, above, below")
    family = POOL_METRICS if default_metric in POOL_METRICS else DAILY_METRICS
    metric = _choice(fields.get("metric", default_metric), f"{path}.metric", family)
    return Verify(metric, **checks)


def parse_rule(raw: Any, path: str = "rule") -> Rule:
    fields = _section(raw, path, {"name", "when", "then", "limits", "settle_s", "verify"},
                      {"name", "when", "then"})
    name = fields["name"]
    if not (isinstance(name, str) and name.strip()):
        raise RuleError(f"{path}.name", f"expected a non-empty name, got {name!r}")
    when = _condition(fields["when"], f"{path}.when")
    then = _action(fields["then"], f"{path}.then")
    acts_on = {"scale": ("pool",), "budget_change": ("campaign", "channel")}.get(then.type)
    if acts_on is not None and when.dimension not in acts_on:
        raise RuleError(f"{path}.then.action", f"{then.type} acts on a {' or a '.join(acts_on)}")
    limits = _limits(fields.get("limits", {}), f"{path}.limits", then)
    settle_s = float(_number(fields.get("settle_s", 0), f"{path}.settle_s", 0, 90 * 86_400))
    verify = None if fields.get("verify") is None else \
        _verify(fields["verify"], f"{path}.verify", when.metric)
    return Rule(name.strip(), when, then, limits, settle_s, verify)


def parse_rules(raw: Any) -> tuple[Rule, ...]:
    """The rules of a mapping {"rules": [...]}; names must be unique."""
    items = _section(raw, "", {"rules"}, {"rules"})["rules"]
    if not isinstance(items, list):
        raise RuleError("rules", f"expected a list, got {type(items).__name__}")
    rules = tuple(parse_rule(item, f"rules[{index}]") for index, item in enumerate(items))
    for index, rule in enumerate(rules):
        if rule.name in {earlier.name for earlier in rules[:index]}:
            raise RuleError(f"rules[{index}].name", f"duplicate rule name {rule.name!r}")
    return rules

class ActionRecord(NamedTuple):
    """An executed action (the history): change is the percent applied, or nodes, or 0."""
    rule: str
    target: str
    action: str
    time_ms: int
    change: float = 0.0


class Decision(NamedTuple):
    decision_id: str
    rule: str
    target: str
    action: str
    parameters: dict[str, Any]
    reason: str
    blocked: bool
    blocked_by: str | None  # the limit that blocked it ("max_change_per_week_percent", ...)
    period: str


def decision_id(rule: str, target: str, period: str) -> str:
    return hashlib.sha256(f"{rule}\x1f{target}\x1f{period}".encode()).hexdigest()[:20]


def condition_rows(daily: pd.DataFrame, when: Condition) -> pd.DataFrame:
    """The daily rows of the condition's dimension and model, day as a datetime."""
    rows = daily[daily.dimension == when.dimension]
    if when.model is not None:
        rows = rows[rows.model == when.model]
    elif "model" in rows and rows.model.nunique() > 1:
        raise ValueError(f"rows of {sorted(rows.model.unique())} models: name one in when.model")
    return rows.assign(day=pd.to_datetime(rows.day))


def _daily_hits(rows: pd.DataFrame, when: Condition) -> dict[str, tuple[str, str]]:
    """target -> (period, reason) where the condition held on each of the last for_days data
    days (a day without a row, or a NaN value, breaks the streak); period: the last day."""
    if when.anomaly is not None:
        rows = detect_anomalies(rows, when.metric, ["key"], "day", when.anomaly)
        rows = rows.assign(holds=rows.anomalous)
    else:  # NaN compares False
        value = rows[when.metric].astype(float)
        compare = COMPARISONS[str(when.comparison)]
        rows = rows.assign(value=value, holds=compare(value, float(when.threshold or 0)))
    last = rows.day.max()
    recent = rows[rows.day > last - pd.Timedelta(days=when.for_days)].sort_values("day")
    hits = {}
    for key, group in recent.groupby("key"):
        if len(group) == when.for_days and bool(group.holds.all()):
            z = group.iloc[-1]
            test = f"{when.comparison} {when.threshold}" if when.anomaly is None else \
                f"anomalous (z {z.z:.2f}, threshold {z.threshold:.2f}, baseline {z.baseline:.3g})"
            shown = ", ".join(f"{v:.3g}" for v in group.value)
            hits[str(key)] = (f"{last:%Y-%m-%d}", f"{when.metric} {test} on {when.for_days} "
                              f"day(s) to {last:%Y-%m-%d}: {shown}")
    return hits


def _pool_hits(pools: Mapping[str, float], rule: Rule, now_ms: int
               ) -> dict[str, tuple[str, str]]:
    """pool -> (period: the start of now_ms's cool-down window, reason)."""
    window_ms = max(1, int((rule.limits.cooldown_s or 300) * 1000))
    when = rule.when
    return {pool: (f"{now_ms // window_ms * window_ms}",
                   f"pressure {value:.3f} {when.comparison} {when.threshold}")
            for pool, value in sorted(pools.items())
            if COMPARISONS[str(when.comparison)](float(value), float(when.threshold or 0))}


def check_limits(rule: Rule, target: str, history: Sequence[ActionRecord], now_ms: int,
                  requested: float | None) -> tuple[str | None, float | None]:
    """(the limit that blocks, or None; the percent allowed, clipped by the weekly cap)."""
    same_type = [r for r in history if r.target == target and r.action == rule.then.type
                 and r.time_ms <= now_ms]
    limits = rule.limits
    if limits.cooldown_s is not None and any(now_ms - r.time_ms < limits.cooldown_s * 1000
                                             for r in same_type):
        return "cooldown_s", requested
    today = day_of(now_ms)
    done_today = sum(r.rule == rule.name and day_of(r.time_ms) == today for r in same_type)
    if limits.max_per_day is not None and done_today >= limits.max_per_day:
        return "max_per_day", requested
    if limits.max_change_per_week_percent is None or requested is None:
        return None, requested
    factor = math.prod(1 + r.change / 100 for r in same_type if now_ms - r.time_ms < WEEK_MS)
    cap = limits.max_change_per_week_percent / 100
    sign = math.copysign(1.0, requested)  # cuts are capped at 1 - cap, raises at 1 + cap
    headroom = max(1 + sign * cap, 0.0) / max(factor, _EPSILON) - 1  # ends exactly at the cap
    allowed = sign * min(sign * requested / 100, sign * headroom)
    if sign * allowed < _EPSILON:
        return "max_change_per_week_percent", requested
    return None, allowed * 100


def evaluate(rules: Sequence[Rule], daily: pd.DataFrame, pools: Mapping[str, float],
             history: Sequence[ActionRecord], now_ms: int) -> list[Decision]:
    """Decisions of every rule whose condition holds now, blocked ones included. `daily`:
    roi_daily rows (model, day, dimension, key, metrics), enough days for for_days and for
    anomaly baselines; `pools`: the current pressure per pool; `history`: executed actions
    (each decision not blocked joins it, so one step's decisions respect each other's limits)."""
    decisions, history = [], list(history)
    for rule in rules:
        if rule.when.dimension == "pool":
            hits = _pool_hits(pools, rule, now_ms)
        else:
            rows = condition_rows(daily, rule.when)
            hits = {} if rows.empty else _daily_hits(rows, rule.when)
        for target, (period, reason) in sorted(hits.items()):
            blocked_by, percent = check_limits(rule, target, history, now_ms,
                                                rule.then.percent)
            then = rule.then
            parameters = ({"percent": percent, "requested_percent": then.percent}
                          if then.type == "budget_change" else {"nodes": then.nodes}
                          if then.type == "scale" else {"message": then.message})
            decisions.append(Decision(decision_id(rule.name, target, period), rule.name,
                                      target, rule.then.type, parameters, reason,
                                      blocked_by is not None, blocked_by, period))
            if blocked_by is None:
                history.append(ActionRecord(rule.name, target, then.type, now_ms,
                                            percent or 0.0))
    return decisions
