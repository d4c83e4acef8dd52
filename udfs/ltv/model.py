"""Customer lifetime value: BG/NBD purchases x Gamma-Gamma order value, per customer.

The models are fitted on per-customer summaries (`summaries_from_transactions`), in periods
of `period_days` days (weeks by default); a fit is an `LtvModel`, which is what is stored and
published (`to_json`/`from_json`) and what scores customers. Definitions, sources and the
CDNOW reproduction: docs/ltv.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from udfs.ltv.bootstrap import bootstrap_draws, bootstrap_intervals
from udfs.ltv.models.bgnbd import BgNbd
from udfs.ltv.models.gamma import GammaGamma
from udfs.ltv.models.pareto import ParetoNbd
from udfs.ltv.summaries import CustomerSummaries, summaries_from_transactions

__all__ = [
    "BgNbd",
    "CustomerSummaries",
    "GammaGamma",
    "LtvModel",
    "ParetoNbd",
    "bootstrap_draws",
    "bootstrap_intervals",
    "fit_model",
    "lifetime_value",
    "summaries_from_transactions",
]

MODEL_NAME = "bg/nbd+gamma-gamma"


def lifetime_value(purchases: BgNbd | ParetoNbd, spend: GammaGamma, summaries: CustomerSummaries,
                   horizon: float, discount_rate: float = 0.0, step: float = 1.0) -> np.ndarray:
    """Expected value of each customer's purchases in (0, horizon] periods after T.

    The horizon is cut into steps of `step` periods (the last one shorter when it does not
    divide the horizon); the purchases expected in a step are valued at the expected order
    value and discounted to T at `discount_rate` per period from the step's end:
    sum_k E[M] (E[Y(t_k)] - E[Y(t_k-1)]) / (1 + discount_rate)^t_k. With discount_rate 0
    this is E[Y(horizon)] x E[M].
    """
    if not (math.isfinite(horizon) and horizon >= 0):
        raise ValueError(f"horizon must be a non-negative number of periods, got {horizon}")
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"step must be a positive number of periods, got {step}")
    if not (math.isfinite(discount_rate) and discount_rate > -1):
        raise ValueError(f"discount_rate must be above -1, got {discount_rate}")
    if horizon == 0 or len(summaries) == 0:
        return np.zeros(len(summaries))
    edges = np.arange(1, math.ceil(horizon / step - 1e-9) + 1) * step
    edges[-1] = horizon
    factors = (1.0 + discount_rate) ** -edges
    x, age = summaries.frequency, summaries.age
    purchases_if_alive = purchases.discounted_if_alive(edges, factors, x, age)
    return np.asarray(purchases.probability_alive(summaries) * purchases_if_alive
                      * spend.expected_order_value(summaries))


@dataclass(frozen=True)
class LtvModel:
    """A fitted LTV model and the data it saw: what is published and stored."""

    purchases: BgNbd
    spend: GammaGamma
    period_days: float  # the models' time unit, in days
    customers: float  # customers the fit saw (sum of weights)
    fitted_through_day: float  # the last day of the calibration data (its end_day)

    def lifetime_value(self, summaries: CustomerSummaries, horizon: float,
                       discount_rate: float = 0.0, step: float = 1.0) -> np.ndarray:
        """`lifetime_value` of these models (horizon, step in periods of period_days)."""
        return lifetime_value(self.purchases, self.spend, summaries, horizon, discount_rate,
                              step)

    def to_json(self) -> str:
        return json.dumps({
            "model": MODEL_NAME,
            "purchases": {name: getattr(self.purchases, name)
                          for name in ("r", "alpha", "a", "b")},
            "spend": {name: getattr(self.spend, name) for name in ("p", "q", "v")},
            "period_days": self.period_days,
            "customers": self.customers,
            "fitted_through_day": self.fitted_through_day,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LtvModel:
        """The model `to_json` wrote; ValueError naming the field that is missing or bad."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ValueError(f"LtvModel JSON does not parse: {error}") from None
        fields = _Fields(data, "")
        model = fields.get("model", str)
        if model != MODEL_NAME:
            raise ValueError(f"LtvModel JSON field 'model' must be {MODEL_NAME!r}, got {model!r}")
        purchases = _Fields(fields.get("purchases", dict), "purchases.")
        spend = _Fields(fields.get("spend", dict), "spend.")
        result = cls(
            purchases=BgNbd(*(purchases.positive(n) for n in ("r", "alpha", "a", "b"))),
            spend=GammaGamma(*(spend.positive(n) for n in ("p", "q", "v"))),
            period_days=fields.positive("period_days"),
            customers=fields.number("customers", minimum=0.0),
            fitted_through_day=fields.number("fitted_through_day"),
        )
        for group in (fields, purchases, spend):
            group.no_others()
        return result


def fit_model(summaries: CustomerSummaries, period_days: float,
              fitted_through_day: float) -> LtvModel:
    """BG/NBD and Gamma-Gamma fitted on the summaries (identical rows merged first: the
    same fit, faster)."""
    rows = summaries.collapsed()
    return LtvModel(purchases=BgNbd.fit(rows.by_purchases()[0]), spend=GammaGamma.fit(rows),
                    period_days=float(period_days), customers=rows.customers(),
                    fitted_through_day=float(fitted_through_day))


class _Fields:
    """One JSON object of an LtvModel, read field by field with errors naming the field."""

    def __init__(self, data: Any, prefix: str) -> None:
        where = prefix.rstrip(".") or "the top level"
        if not isinstance(data, dict):
            raise ValueError(f"LtvModel JSON: {where} must be an object, "
                             f"got {type(data).__name__}")
        self.data, self.prefix = data, prefix
        self.read: set[str] = set()

    def get(self, name: str, kind: type) -> Any:
        if name not in self.data:
            raise ValueError(f"LtvModel JSON: field '{self.prefix}{name}' is missing")
        self.read.add(name)
        value = self.data[name]
        if not isinstance(value, kind):
            raise ValueError(f"LtvModel JSON: field '{self.prefix}{name}' must be a "
                             f"{kind.__name__}, got {value!r}")
        return value

    def number(self, name: str, minimum: float = -math.inf) -> float:
        value = self.get(name, object)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < minimum:
            bound = "" if minimum == -math.inf else f" >= {minimum:g}"
            raise ValueError(f"LtvModel JSON: field '{self.prefix}{name}' must be a finite "
                             f"number{bound}, got {value!r}")
        return float(value)

    def positive(self, name: str) -> float:
        value = self.number(name)
        if value <= 0:
            raise ValueError(f"LtvModel JSON: field '{self.prefix}{name}' must be positive, "
                             f"got {value!r}")
        return value

    def no_others(self) -> None:
        unknown = sorted(set(self.data) - self.read)
        if unknown:
            raise ValueError(f"LtvModel JSON: unknown field '{self.prefix}{unknown[0]}'")
