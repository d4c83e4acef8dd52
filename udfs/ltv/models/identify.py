"""Whether a fit of the LTV models is an estimate: what to tell the user when it is not.

Two signs that the data cannot pin the models down: a parameter the optimiser left at (or
next to) its bound, e^-25 or e^25 (udfs/ltv/models/fit.py) -- the likelihood still rose towards
a limit of the model there, so the value is an artefact of the bound -- and too few
customers or repeat buyers. One customer with repeat purchases "fitted" r 4.5e9, alpha
2.4e10, a 1.4e-11, b 7.2e10. On customers drawn from the CDNOW fit (T 39 weeks, 40 draws
each) BG/NBD ended at a bound in 12 fits of 50 customers, 6 of 100 (about 40 repeat
buyers), 3 of 200 and none of 500 or 2,000.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from udfs.ltv.models.bgnbd import BgNbd
from udfs.ltv.models.fit import LOG_BOUND
from udfs.ltv.models.gamma import GammaGamma, spenders
from udfs.ltv.summaries import CustomerSummaries

# within e^2 of the bound counts as at it: where the likelihood is flat along a ridge the
# optimiser stops short of the bound, as far out as meaninglessly
BOUND_MARGIN = 2.0
# below these the fits scatter widely (see the module's doc); they are warnings, not errors:
# a small shop's first model is still better than none, if it is known for what it is
MIN_CUSTOMERS = 100
MIN_REPEAT_BUYERS = 30


def at_bound(names: Sequence[str], values: Sequence[float]) -> list[str]:
    """The names whose value lies at (or within BOUND_MARGIN of) the optimiser's bounds."""
    return [name for name, value in zip(names, values, strict=True)
            if abs(math.log(value)) >= LOG_BOUND - BOUND_MARGIN]


def fit_warnings(summaries: CustomerSummaries, purchases: BgNbd | None = None,
                 spend: GammaGamma | None = None) -> list[str]:
    """One line per reason the fit of `purchases` and/or `spend` on `summaries` is no
    estimate; empty for a normal fit."""
    lines = []
    for title, model, names in (("BG/NBD", purchases, ("r", "alpha", "a", "b")),
                                ("Gamma-Gamma", spend, ("p", "q", "v"))):
        if model is None:
            continue
        values = [float(getattr(model, name)) for name in names]
        found = at_bound(names, values)
        if found:
            shown = ", ".join(f"{name} {getattr(model, name):.3g}" for name in found)
            lines.append(f"{title}: {shown} at the optimiser's bound (e^-{LOG_BOUND:g} to "
                         f"e^{LOG_BOUND:g}): the data do not pin "
                         f"{'it' if len(found) == 1 else 'them'} down, so the fit is a limit "
                         "of the model, not an estimate")
    customers = summaries.customers()
    repeaters = spenders(summaries).customers() if spend is not None \
        else float(summaries.weight[summaries.frequency > 0].sum())
    if customers < MIN_CUSTOMERS or repeaters < MIN_REPEAT_BUYERS:
        lines.append(f"{customers:,.0f} customers, {repeaters:,.0f} with repeat purchases: "
                     f"too few to identify the model{'s' if purchases and spend else ''} "
                     f"(at least {MIN_CUSTOMERS} customers and {MIN_REPEAT_BUYERS} repeat "
                     "buyers are wanted); the parameters would move a lot with other "
                     "customers of the same kind")
    return lines
