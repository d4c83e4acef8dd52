"""The ratios a finance reader sees, defined once, with one rule for small denominators;
each has one name everywhere (roi_daily's column, the CSV header, the page and the CLI):

- `roi`, "ROI" = revenue / cost, cost = ad spend + compute: the revenue each unit of
  cost brought (what roi_daily.roi holds and the control loop's rules read; the LTV
  tables' first-order ROI and LTV ROI are the same ratio on their figures);
- `roas`, "ROAS" = revenue / ad spend (what ad platforms call return on ad spend);
- `margin_roi`, "Margin ROI" = (revenue x gross margin - cost) / cost: the profit per unit
  of cost at `roi.gross_margin` (0 = break-even), stated wherever it is shown.

No ratio is given on a denominator below `min_cost` (default 1.00 in the reporting
currency): divided by a few cents of compute, a channel's revenue would read as a return
of millions. The dashboard shows such a cell as "—" with a footnote, CSV leaves it empty,
the CLI prints "-". A row whose only cost is compute (no ad spend: organic, direct, email)
is marked "compute only" instead of its ROI and margin ROI (compute_only): a few dollars
of GPU time would read as a return of thousands on revenue nobody paid to acquire.
"""

from __future__ import annotations

import math

MIN_COST = 1.0
GROSS_MARGIN = 1.0
COMPUTE_ONLY = "compute only"
NO_AD_SPEND = 0.005  # under half a cent: shown as 0.00


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


def compute_only(ad_spend: float, compute: float) -> bool:
    """Whether a row's only cost is compute: no ad spend, some compute. Its ROI and margin
    ROI are shown as COMPUTE_ONLY, not as a number."""
    return abs(ad_spend) < NO_AD_SPEND and compute > 0


def gross_margin_text(margin: float) -> str:
    """The margin as stated beside a margin ROI: "gross margin 60 %"."""
    return f"gross margin {100 * margin:g} %"


def cost_ratios(revenue: float, ad_spend: float, compute: float,
                margin: float = GROSS_MARGIN, min_cost: float = MIN_COST
                ) -> tuple[float | str | None, float | None, float | str | None]:
    """A row's (ROI, ROAS, margin ROI) as every reader shows them: ROI and margin ROI
    are COMPUTE_ONLY where compute is the row's only cost."""
    cost = ad_spend + compute
    if compute_only(ad_spend, compute):
        return COMPUTE_ONLY, roas(revenue, ad_spend, min_cost), COMPUTE_ONLY
    return (revenue_per_cost(revenue, cost, min_cost), roas(revenue, ad_spend, min_cost),
            margin_roi(revenue, cost, margin, min_cost))
