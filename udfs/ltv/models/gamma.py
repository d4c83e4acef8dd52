"""Gamma-Gamma: how much a customer spends per purchase.

Fader, Hardie & Lee (2005), "RFM and CLV: Using Iso-Value Curves for Customer Base
Analysis", Journal of Marketing Research 42(4), and Fader & Hardie (2013), "The
Gamma-Gamma Model of Monetary Value". A customer's purchase values are
Gamma(p, nu), nu ~ Gamma(q, v) across customers; the mean m of its x repeat purchases then
has the density (the note's eq. 3)

    f(m | p, q, v, x) = Gamma(px + q) / (Gamma(px) Gamma(q)) v^q m^(px-1) x^(px)
                        / (v + x m)^(px + q)

and E[M | p, q, v, x, m] = (q - 1) / (px + q - 1) * pv / (q - 1) + px / (px + q - 1) * m,
a weighted mean of the population mean pv / (q - 1) and the customer's own mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, gammaln

from udfs.ltv.models.fit import dot, group_by, maximise
from udfs.ltv.summaries import CustomerSummaries

_START = np.array([1.0, 1.0, 1.0])


@dataclass(frozen=True)
class GammaGamma:
    """Fitted Gamma-Gamma parameters: values ~ Gamma(p, nu), nu ~ Gamma(q, v)."""

    p: float
    q: float
    v: float

    def __post_init__(self) -> None:
        for name in ("p", "q", "v"):
            value = float(getattr(self, name))
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"GammaGamma.{name} must be a positive number, got {value}")
            object.__setattr__(self, name, value)

    def params(self) -> np.ndarray:
        return np.array([self.p, self.q, self.v])

    @classmethod
    def fit(cls, summaries: CustomerSummaries, start: GammaGamma | None = None) -> GammaGamma:
        """Maximum likelihood on the customers with x > 0 (and a positive mean value),
        each row counted `weight` times; the others carry no information on spend."""
        rows = spenders(summaries)
        if rows.customers() <= 0:
            raise ValueError("GammaGamma.fit needs customers with repeat purchases (x > 0) "
                             "of positive value")
        if start is None:
            # v scales value: start it so that p v / (q - 1) is near the mean value
            mean = float(np.average(rows.monetary, weights=rows.weight))
            x0 = np.array([1.0, 2.0, mean])
        else:
            x0 = start.params()
        return cls(*(float(v) for v in maximise(_Likelihood(rows), x0, "GammaGamma.fit")))

    def log_likelihood(self, summaries: CustomerSummaries) -> float:
        """Sum over the rows with x > 0 of weight x ln f(m | p, q, v, x)."""
        rows = spenders(summaries)
        value, _ = _Likelihood(rows)(self.params())
        return -value * rows.customers()

    def population_mean(self) -> float:
        """E[value of a purchase] over all customers, p v / (q - 1) (infinite for q <= 1)."""
        return self.p * self.v / (self.q - 1.0) if self.q > 1.0 else float(np.inf)

    def expected_order_value(self, summaries: CustomerSummaries) -> np.ndarray:
        """E[M | x, m]: the expected value of a customer's future purchase; customers with
        x == 0 get the population mean p v / (q - 1)."""
        if self.q <= 1.0:
            raise ValueError(f"GammaGamma with q = {self.q} <= 1 has no finite mean value")
        p, q, v = self.p, self.q, self.v
        px = p * summaries.frequency  # x == 0 (monetary 0): the population mean
        return np.asarray((p * v + px * summaries.monetary) / (px + q - 1.0))


def spenders(summaries: CustomerSummaries) -> CustomerSummaries:
    """The rows the spend model learns from: repeat buyers with a positive mean value."""
    return summaries.take((summaries.frequency > 0) & (summaries.monetary > 0)
                          & (summaries.weight > 0))


class _Likelihood:
    """Mean negative log-likelihood of the Gamma-Gamma and its gradient in (p, q, v)."""

    def __init__(self, rows: CustomerSummaries) -> None:
        w, x, m = rows.weight, rows.frequency, rows.monetary
        self.total = float(w.sum())
        self.xs, _, self.wx = group_by(x, w)
        self.w, self.x, self.m = w, x, m
        self.xm = x * m
        # sum w x (ln m + ln x): the part of (px - 1) ln m + px ln x that moves with p
        self.p_slope = dot(w, x * (np.log(m) + np.log(x)))
        self.log_m = dot(w, np.log(m))

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        p, q, v = (float(t) for t in theta)
        xs, wx = self.xs, self.wx
        pxq = p * xs + q
        ll = dot(wx, gammaln(pxq) - gammaln(p * xs))
        ll += self.total * (q * np.log(v) - gammaln(q)) + p * self.p_slope - self.log_m
        g_p = dot(wx, xs * (digamma(pxq) - digamma(p * xs))) + self.p_slope
        g_q = dot(wx, digamma(pxq)) + self.total * (np.log(v) - digamma(q))
        g_v = self.total * q / v
        log_vxm = np.log(v + self.xm)
        coef = p * self.x + q
        ll -= dot(self.w, coef * log_vxm)
        g_p -= dot(self.w, self.x * log_vxm)
        g_q -= dot(self.w, log_vxm)
        g_v -= dot(self.w, coef / (v + self.xm))
        return -ll / self.total, -np.array([g_p, g_q, g_v]) / self.total
