"""The totals a finance reader sees must equal the sums they come from: the ties between
the result tables, checked as comparisons (udfs.reconcile.drift) so a break is shown, stored and
alerted like a billing drift.

Each tie compares `ours` (the table a reader looks at) with `theirs` (the table it is
computed from), per key:

- revenue / conversions, per model, day and ROI dimension: Σ roi_daily = Σ credits of the
  model's orders that day (every dimension splits the same credits);
- order revenue, per model and day: Σ credited revenue = Σ the orders' revenue as the
  job last reported them (conversions: net of refunds, where an orders change stream
  brings them), on the days the conversions table has;
- calibrated conversions and revenue, per model over the calibrated window: Σ roi_calibrated
  (the channels and the baseline) = Σ roi_daily by channel over the same days;
- spend, per model, day and campaign: Σ allocated (roi_daily by campaign) + unallocated =
  the campaign's spend that day;
- compute_cost, per model over the checked days: Σ allocated + unallocated compute = the
  priced GPU calls, and with fully loaded compute their GPUs' idle cost too: the GPU bill
  (linked cost counts on the order's day, unlinked on the call's);
- gpu_cost, per GPU and day: Σ call cost + idle cost = the priced intervals' cost;
- the LTV-based return, per model and dimension (channel, campaign), on its as-of day:
  Σ customers, Σ first-order revenue and Σ acquisition cost over the keys = the credit,
  the credited revenue and the allocated cost (order_costs) of the customers' first
  orders (each known user's earliest `new` order on or before the as-of day).

A tie breaks when the two sides differ by more than half a cent (amounts) or 1e-6
(conversion counts), or when one side has the key and the other has not. While the stream
still fills the warehouse, a tie of a day the ROI job has not closed yet is open, not
broken (still_open): its credits or spend may be loaded before the day's report, its GPU
cost may wait up to the link window for the order that claims it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from udfs.reconcile.drift import BREACH, OK, Comparison, Contributor, Key, Rule, drift

SCOPE = "internal"
AMOUNT_TOLERANCE = 0.005  # half a cent: figures tie "to the cent"
COUNT_TOLERANCE = 1e-6
ALL_DAYS = "*"

Sums = Mapping[tuple[str, ...], float]


class Tie(NamedTuple):
    """One kind of tie: its metric, what each side is read from, and its tolerance."""

    metric: str
    ours: str
    theirs: str
    tolerance: float


REVENUE = Tie("revenue", "roi_daily", "attribution_credits", AMOUNT_TOLERANCE)
CONVERSIONS = Tie("conversions", "roi_daily", "attribution_credits", COUNT_TOLERANCE)
# the calibrated ROI (seedance incrementality) per model over its window: its channels and
# baseline add up to the uncalibrated conversions and revenue
CALIBRATED_REVENUE = Tie("calibrated_revenue", "roi_calibrated", "roi_daily", AMOUNT_TOLERANCE)
CALIBRATED_CONVERSIONS = Tie("calibrated_conversions", "roi_calibrated", "roi_daily",
                             COUNT_TOLERANCE)
ORDER_REVENUE = Tie("order_revenue", "attribution_credits", "conversions", AMOUNT_TOLERANCE)
SPEND = Tie("spend", "roi_daily + roi_unallocated", "ad_spend", AMOUNT_TOLERANCE)
COMPUTE = Tie("compute_cost", "roi_daily + roi_unallocated", "gpu_call_costs",
              AMOUNT_TOLERANCE)
# fully loaded compute (udfs/roi/compute_loading.py): the idle cost reaches ROI too
COMPUTE_LOADED = Tie("compute_cost", "roi_daily + roi_unallocated",
                     "gpu_call_costs + gpu_idle_costs", AMOUNT_TOLERANCE)
GPU_COST = Tie("gpu_cost", "gpu_call_costs + gpu_idle_costs", "priced intervals",
               AMOUNT_TOLERANCE)
FIRST_ORDERS = "attribution_credits (first orders)"
LTV_CUSTOMERS = Tie("ltv_customers", "ltv_return", FIRST_ORDERS, COUNT_TOLERANCE)
LTV_REVENUE = Tie("ltv_first_order_revenue", "ltv_return", FIRST_ORDERS, AMOUNT_TOLERANCE)
LTV_COST = Tie("ltv_acquisition_cost", "ltv_return", "order_costs (first orders)",
               AMOUNT_TOLERANCE)
TIES = (REVENUE, CONVERSIONS, ORDER_REVENUE, CALIBRATED_REVENUE, CALIBRATED_CONVERSIONS,
        SPEND, COMPUTE, COMPUTE_LOADED, GPU_COST, LTV_CUSTOMERS, LTV_REVENUE, LTV_COST)
# ties of counts, not amounts: no currency
COUNTS = (CONVERSIONS, CALIBRATED_CONVERSIONS, LTV_CUSTOMERS)


def tie(tie: Tie, entity: str, day: str, ours: float | None, theirs: float | None,
        currency: str) -> Comparison:
    """One key's comparison; a side without the key is None (and counts as 0)."""
    o, t = ours or 0.0, theirs or 0.0
    broken = abs(o - t) > tie.tolerance
    return Comparison(Key(SCOPE, "", "", entity, day, tie.metric),
                      "" if tie in COUNTS else currency, ours, theirs, drift(o, t),
                      BREACH if broken else OK, Rule(0.0, 0.0),
                      (Contributor(tie.ours, o, None), Contributor(tie.theirs, t, None)),
                      f"{tie.ours} vs {tie.theirs}")


def _pairs(ours: Sums, theirs: Sums) -> Iterable[tuple[tuple[str, ...], float | None,
                                                       float | None]]:
    for key in sorted(ours.keys() | theirs.keys()):
        yield key, ours.get(key), theirs.get(key)


def revenue_ties(roi: Mapping[tuple[str, str, str], tuple[float, float]],
                 credits: Mapping[tuple[str, str], tuple[float, float]],
                 dimensions: Iterable[str], currency: str) -> list[Comparison]:
    """roi: (model, day, dimension) -> (conversions, revenue) summed over keys;
    credits: (model, day) -> (credit, revenue) summed over the model's credit rows."""
    out = []
    models_days = {key[:2] for key in roi} | set(credits)
    for model, day in sorted(models_days):
        credited = credits.get((model, day))
        for dimension in dimensions:
            reported = roi.get((model, day, dimension))
            entity = f"{model}/{dimension}"
            out.append(tie(REVENUE, entity, day, reported and reported[1],
                           credited and credited[1], currency))
            out.append(tie(CONVERSIONS, entity, day, reported and reported[0],
                           credited and credited[0], currency))
    return out


def order_revenue_ties(credits: Mapping[tuple[str, str], tuple[float, float]],
                       orders: Mapping[str, float], currency: str) -> list[Comparison]:
    """credits: (model, day) -> (credit, revenue); orders: day -> the orders' revenue.
    Each model's credited revenue of a day is its orders' revenue: a refund or a changed
    amount that reached the orders but not a model's credits (or the other way) breaks."""
    models = sorted({model for model, _ in credits})
    return [tie(ORDER_REVENUE, f"{model}/orders", day,
                credits[model, day][1] if (model, day) in credits else None, revenue,
                currency)
            for day, revenue in sorted(orders.items()) for model in models]


def calibrated_ties(calibrated: Mapping[str, tuple[float, float]],
                    uncalibrated: Mapping[str, tuple[float, float]], day: str,
                    currency: str) -> list[Comparison]:
    """Per model (conversions, revenue): roi_calibrated's channels and baseline against
    roi_daily's channels over the calibrated window (judged on its last day)."""
    out = []
    for model in sorted(calibrated.keys() | uncalibrated.keys()):
        ours, theirs = calibrated.get(model), uncalibrated.get(model)
        out.append(tie(CALIBRATED_CONVERSIONS, f"{model}/calibrated", day,
                       ours and ours[0], theirs and theirs[0], currency))
        out.append(tie(CALIBRATED_REVENUE, f"{model}/calibrated", day, ours and ours[1],
                       theirs and theirs[1], currency))
    return out


def spend_ties(allocated: Sums, unallocated: Sums, spend: Sums,
               models: Iterable[str], currency: str) -> list[Comparison]:
    """allocated / unallocated: (model, day, campaign) -> amount; spend: (day, campaign) ->
    amount. Every model must account for every campaign-day's spend."""
    out = []
    accounted = {key: allocated.get(key, 0.0) + unallocated.get(key, 0.0)
                 for key in allocated.keys() | unallocated.keys()}
    for model in sorted(set(models)):
        mine = {key[1:]: amount for key, amount in accounted.items() if key[0] == model}
        for (day, campaign), ours, theirs in _pairs(mine, spend):
            if theirs is None and not ours:
                continue  # a credited campaign without spend: nothing to account for
            out.append(tie(SPEND, f"{model}/{campaign}", day, ours, theirs, currency))
    return out


def compute_ties(accounted: Mapping[str, float], models: Iterable[str], bill: float,
                 currency: str, fully_loaded: bool = True) -> list[Comparison]:
    """accounted: model -> allocated + unallocated compute over the checked days; bill:
    the priced GPU calls' cost over the same days, plus the idle cost when fully loaded."""
    kind = COMPUTE_LOADED if fully_loaded else COMPUTE
    return [tie(kind, model, ALL_DAYS, accounted.get(model), bill, currency)
            for model in sorted(set(models))]


def gpu_ties(parts: Sums, intervals: Sums, currency: str) -> list[Comparison]:
    """parts / intervals: (gpu, day) -> calls + idle / the intervals' own cost."""
    return [tie(GPU_COST, gpu, day, ours, theirs, currency)
            for (gpu, day), ours, theirs in _pairs(parts, intervals)]


def ltv_return_ties(reported: Mapping[tuple[str, str], tuple[float, float, float]],
                    first_orders: Mapping[str, tuple[float, float, float]],
                    day: str, currency: str) -> list[Comparison]:
    """reported: (model, dimension) -> (customers, first-order revenue, acquisition cost)
    summed over ltv_return's keys; first_orders: model -> (credit, revenue, allocated cost)
    of the first orders. Every dimension splits the same customers."""
    out = []
    models = sorted({model for model, _ in reported} | set(first_orders))
    dimensions = sorted({dimension for _, dimension in reported})
    for model in models:
        theirs = first_orders.get(model)
        for dimension in dimensions:
            ours = reported.get((model, dimension))
            entity = f"{model}/{dimension}"
            for index, kind in enumerate((LTV_CUSTOMERS, LTV_REVENUE, LTV_COST)):
                out.append(tie(kind, entity, day, ours and ours[index],
                               theirs and theirs[index], currency))
    return out


def breaks(comparisons: Iterable[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.status == BREACH]


def still_open(comparisons: Sequence[Comparison], rows_through: str,
               compute_through: str | None) -> list[Comparison]:
    """The ties not to judge yet, given the days the ROI job has closed: every day up to
    `rows_through` has its report, every day up to `compute_through` its GPU cost placed
    too (None: no day yet). A tie of a later day is open; the compute ties, over all the
    checked days, while any of them (the GPU's days included) is after compute_through.
    The GPU ties compare the GPU cost job's own rows and are always judged."""
    days = {c.key.day for c in comparisons} - {ALL_DAYS}
    compute_open = any(compute_through is None or day > compute_through for day in days)
    return [c for c in comparisons if c.key.metric != GPU_COST.metric and (
        compute_open if c.key.day == ALL_DAYS else c.key.day > rows_through)]
