"""Customer lifetime value: the BG/NBD, Pareto/NBD and Gamma-Gamma models (udfs.ltv.models),
their summaries, fits, intervals and holdout checks, the per-customer tallies of the stream,
the lifecycle and LTV allocation weights and the LTV-based return per channel.
"""

from __future__ import annotations

from udfs.ltv.allocation import (
    BASES,
    DEFAULT_SEGMENT_WEIGHTS,
    LIFECYCLE_STAGE,
    LTV_SEGMENT,
    OrderScore,
    OrderSegmenter,
    SegmentWeights,
    allocation_weight,
    tallies_of,
)
from udfs.ltv.bootstrap import (
    bootstrap_intervals,
)
from udfs.ltv.channel_return import (
    COST_COLUMNS,
    CREDIT_COLUMNS,
    SPEND_COLUMNS,
    ltv_return,
    orders_of,
)
from udfs.ltv.draws import (
    bootstrap_models,
)
from udfs.ltv.evaluate import (
    HoldoutComparison,
    HoldoutWindow,
    compare_holdout,
)
from udfs.ltv.model import (
    LtvModel,
    fit_model,
)
from udfs.ltv.models.bgnbd import (
    BgNbd,
)
from udfs.ltv.models.gamma import (
    spenders,
)
from udfs.ltv.models.identify import (
    at_bound,
    fit_warnings,
)
from udfs.ltv.segments import (
    CUTS,
    SEGMENTS,
    score_customers,
    segment_thresholds,
)
from udfs.ltv.simulate import (
    simulate_bgnbd,
)
from udfs.ltv.summaries import (
    CustomerSummaries,
    summaries_from_transactions,
)
from udfs.ltv.tally import (
    CloseClock,
    Order,
    Orders,
    Tallies,
    customer_rows,
    customer_scores,
    day_number,
    summaries_at,
    summaries_of,
)

__all__ = [
    "BASES",
    "BgNbd",
    "COST_COLUMNS",
    "CREDIT_COLUMNS",
    "CUTS",
    "CloseClock",
    "CustomerSummaries",
    "DEFAULT_SEGMENT_WEIGHTS",
    "HoldoutComparison",
    "HoldoutWindow",
    "LIFECYCLE_STAGE",
    "LTV_SEGMENT",
    "LtvModel",
    "Order",
    "OrderScore",
    "OrderSegmenter",
    "Orders",
    "SEGMENTS",
    "SPEND_COLUMNS",
    "SegmentWeights",
    "Tallies",
    "allocation_weight",
    "at_bound",
    "bootstrap_intervals",
    "bootstrap_models",
    "compare_holdout",
    "customer_rows",
    "customer_scores",
    "day_number",
    "fit_model",
    "fit_warnings",
    "ltv_return",
    "orders_of",
    "score_customers",
    "segment_thresholds",
    "simulate_bgnbd",
    "spenders",
    "summaries_at",
    "summaries_from_transactions",
    "summaries_of",
    "tallies_of",
]
