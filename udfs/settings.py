"""What is computed, as one frozen value: the settings every engine takes.

The stream (pipelines/flink), the backfill (Spark or pandas) and `seedance attribute` all
compute with a `ComputeSettings`, built in one place from the job config's YAML
(`StreamingJobConfig.computation`), so the three cannot disagree on lookback, models,
refit period or stage weights. Its parts validate themselves; this class checks how they
fit together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from udfs.attribution import DATA_DRIVEN_MODELS, PER_CONVERSION_MODELS, ModelParams, validate_models
from udfs.journeys import JourneyConfig
from udfs.lifecycle import StageWeights
from udfs.ltv import BASES, LIFECYCLE_STAGE, LTV_SEGMENT, OrderSegmenter, SegmentWeights
from udfs.periods import DAY_MS
from udfs.ratios import GROSS_MARGIN, MIN_COST
from udfs.roi import MODES


@dataclass(frozen=True)
class ComputeSettings:
    journey: JourneyConfig  # lookback, max touches, lifecycle windows, duplicate horizon
    models: tuple[str, ...]  # reported models, in the order given
    params: ModelParams  # time_decay's half-life, markov order
    refit_every_ms: int  # the data-driven models are refitted when such a period closes
    stage_weights: StageWeights  # how costs are shared between lifecycle stages
    link_window_ms: int  # how far apart an order and the GPU calls it paid for may lie
    currency: str  # of revenue, spend and compute in the ROI rows
    # fully_loaded: a GPU's idle cost follows its calls to their orders (udfs/compute_loading);
    # direct: only the calls' own cost reaches ROI
    compute_cost: str = "fully_loaded"
    min_cost: float = MIN_COST  # no ratio on a cost under this (udfs/ratios.py)
    gross_margin: float = GROSS_MARGIN  # of revenue, for the margin ROI
    # what a conversion's cost weight comes from: its lifecycle stage, or (ltv_segment)
    # its customer's LTV segment under `segmenter` (udfs/ltv/allocation.py)
    allocation_basis: str = LIFECYCLE_STAGE
    segment_weights: SegmentWeights = SegmentWeights()
    segmenter: OrderSegmenter | None = None

    def __post_init__(self) -> None:
        validate_models(self.models)
        if not self.models:
            raise ValueError("models must name at least one model")
        if self.refit_every_ms < 1000:
            raise ValueError(f"the refit period must be at least 1 s, got {self.refit_every_ms} ms")
        if self.link_window_ms <= 0:
            raise ValueError(f"the link window must be positive, got {self.link_window_ms} ms")
        if not (self.min_cost >= 0 and math.isfinite(self.min_cost)):
            raise ValueError(f"min_cost must be a non-negative number, got {self.min_cost}")
        if not 0 < self.gross_margin <= 1:
            raise ValueError(f"gross_margin must be in (0, 1], got {self.gross_margin}")
        if self.allocation_basis not in BASES:
            raise ValueError(f"allocation_weights must be one of {', '.join(BASES)}, got "
                             f"{self.allocation_basis!r}")
        if self.allocation_basis == LTV_SEGMENT:
            if self.segmenter is None:
                raise ValueError("allocation_weights ltv_segment needs the allocation model "
                                 "(roi.ltv_model: a model message file)")
            self.segment_weights.check_names(self.segmenter.names)
        if self.compute_cost not in MODES:
            raise ValueError(f"compute_cost must be one of {', '.join(MODES)}, got "
                             f"{self.compute_cost!r}")

    @property
    def by_segment(self) -> SegmentWeights | None:
        """The segment weights when costs are shared by LTV segment, else None."""
        return self.segment_weights if self.allocation_basis == LTV_SEGMENT else None

    @property
    def fully_loaded(self) -> bool:
        """Whether idle GPU cost is shared out to the calls (and so to the orders)."""
        return self.compute_cost == "fully_loaded"

    @property
    def per_conversion(self) -> tuple[str, ...]:
        """The models that weigh each conversion's journey on its own."""
        return tuple(m for m in self.models if m in PER_CONVERSION_MODELS)

    @property
    def data_driven(self) -> tuple[str, ...]:
        """The models fitted on the counts of many journeys, once per refit period."""
        return tuple(m for m in self.models if m in DATA_DRIVEN_MODELS)

    @property
    def credit_lag_ms(self) -> int:
        """How far behind event time a conversion's credits can appear: a data-driven
        model's credits wait for the refit at the end of the conversion's period. Whoever
        waits for credits (the ROI job's watermark) waits this long."""
        return self.refit_every_ms if self.data_driven else 0


__all__ = ["DAY_MS", "ComputeSettings"]
