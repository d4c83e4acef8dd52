"""The ratios a finance reader sees, defined once, with one rule for small denominators.

- ROAS = revenue / ad spend (what ad platforms call return on ad spend);
- ROI = (revenue x gross margin - cost) / cost, cost = ad spend + compute: the return on
  what was spent, in the currency's units of profit per unit of cost (0 = break-even);
- revenue / cost: what `roi_daily.roi` has always held, the revenue each unit of cost
  brought (the control loop's rules read it).

No ratio is given on a denominator below `min_cost` (default 1.00 in the reporting
currency): divided by a few cents of compute, a channel's revenue would read as a return
of millions. The dashboard shows such a cell as "—" with a footnote, CSV leaves it empty,
the CLI prints "-".
"""

from __future__ import annotations

import math

MIN_COST = 1.0
GROSS_MARGIN = 1.0


def _ratio(numerator: float, denominator: float, min_cost: float) -> float | None:
    if not (math.isfinite(numerator) and math.isfinite(denominator)) \
            or denominator < max(min_cost, 1e-12):
        return None
    return numerator / denominator


def roas(revenue: float, ad_spend: float, min_cost: float = MIN_COST) -> float | None:
    """Revenue per unit of ad spend; None below the floor."""
    return _ratio(revenue, ad_spend, min_cost)


def margin_roi(revenue: float, cost: float, margin: float = GROSS_MARGIN,
               min_cost: float = MIN_COST) -> float | None:
    """(revenue x margin - cost) / cost; None below the floor."""
    return _ratio(revenue * margin - cost, cost, min_cost)


def revenue_per_cost(revenue: float, cost: float, min_cost: float = MIN_COST) -> float | None:
    """Revenue per unit of cost; None below the floor."""
    return _ratio(revenue, cost, min_cost)
