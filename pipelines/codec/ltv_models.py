"""The LTV model message (the compacted `ltv_models` topic's): one JSON object, the fields
of `LtvModel.to_json()` (the BG/NBD and Gamma-Gamma parameters, period_days, customers,
fitted_through_day), and

    "horizon_days": 365,            the LTV horizon after the as-of day (whole days)
    "discount_rate": 0.0,           per period of period_days (udfs.ltv.model.lifetime_value)
    "segments": {"names": ["low", "mid", "high", "top"],
                 "bounds": [b1, b2, b3]}   predicted LTV values between the segments

Its version is fitted_through_day, the last day of the data it was fitted on. Here the
message is written, read and checked (`ModelMessage.to_json`, `ModelMessage.from_json`),
and read from a file (`allocation_model`, the ROI job's `roi.ltv_model`); publishing it and
reading it back from Kafka is pipelines/ltv/models_topic.py's. docs/ltv-stream.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from udfs.ltv import (
    CUTS,
    SEGMENTS,
    CustomerSummaries,
    LtvModel,
    OrderSegmenter,
    customer_scores,
    segment_thresholds,
)

KEY = "current"  # the one key of the topic: compaction keeps its latest message
_OWN = ("horizon_days", "discount_rate", "segments")


@dataclass(frozen=True)
class ModelMessage:
    """A fitted model and how the stream scores with it."""

    model: LtvModel
    horizon_days: int
    discount_rate: float
    bounds: tuple[float, ...]
    names: tuple[str, ...] = SEGMENTS

    def __post_init__(self) -> None:
        # horizon, discount rate and segments: checked by the scoring they describe
        self.segmenter()
        if not self.model.spend.q > 1:
            raise ValueError(f"spend.q must be above 1 (q = {self.model.spend.q:g} has no "
                             "finite mean order value)")
        object.__setattr__(self, "bounds", tuple(float(b) for b in self.bounds))
        object.__setattr__(self, "names", tuple(self.names))

    @property
    def version(self) -> float:
        """fitted_through_day: a later fit has a higher one."""
        return self.model.fitted_through_day

    @classmethod
    def fitted(cls, model: LtvModel, summaries: CustomerSummaries, horizon_days: int,
               discount_rate: float = 0.0, cuts: Sequence[float] = CUTS,
               names: Sequence[str] = SEGMENTS) -> ModelMessage:
        """The message of a model fitted on `summaries` (all customers, as of
        fitted_through_day, in periods of model.period_days): the segment bounds are the
        cut quantiles of their predicted LTV over the horizon
        (udfs.ltv.segments.segment_thresholds)."""
        value = model.lifetime_value(summaries, horizon_days / model.period_days,
                                     discount_rate)
        return cls(model, horizon_days, discount_rate,
                   tuple(float(b) for b in segment_thresholds(value, cuts)), tuple(names))

    def scores(self, ids: np.ndarray, summaries: CustomerSummaries) -> dict[str, np.ndarray]:
        """udfs.ltv.tally.customer_scores under this message."""
        return customer_scores(self.model, ids, summaries, self.horizon_days,
                               self.discount_rate, self.bounds, self.names)

    def to_json(self) -> str:
        data = json.loads(self.model.to_json())
        data.update(horizon_days=self.horizon_days, discount_rate=self.discount_rate,
                    segments={"names": list(self.names), "bounds": list(self.bounds)})
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelMessage:
        """The message `to_json` wrote; ValueError naming what is missing or bad."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise ValueError(f"an LTV model message must be JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"an LTV model message must be a JSON object, got "
                             f"{type(data).__name__}")
        missing = [name for name in _OWN if name not in data]
        if missing:
            raise ValueError(f"LTV model message: field '{missing[0]}' is missing")
        horizon, rate, segments = (data.pop(name) for name in _OWN)
        if isinstance(horizon, bool) or not isinstance(horizon, int | float) \
                or not math.isfinite(horizon) or horizon != int(horizon):
            raise ValueError(f"LTV model message: field 'horizon_days' must be a whole "
                             f"number of days, got {horizon!r}")
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ValueError(f"LTV model message: field 'discount_rate' must be a number, got "
                             f"{rate!r}")
        if not isinstance(segments, dict) or set(segments) != {"names", "bounds"} \
                or not isinstance(segments["names"], list) \
                or not isinstance(segments["bounds"], list) \
                or not all(isinstance(b, int | float) and not isinstance(b, bool)
                           for b in segments["bounds"]):
            raise ValueError("LTV model message: field 'segments' must be an object of "
                             f"'names' (a list) and 'bounds' (a list of numbers), got "
                             f"{segments!r}")
        model = LtvModel.from_json(json.dumps(data))
        try:
            return cls(model, int(horizon), float(rate), tuple(segments["bounds"]),
                       tuple(segments["names"]))
        except ValueError as error:
            raise ValueError(f"LTV model message: {error}") from None

    def segmenter(self) -> OrderSegmenter:
        """The orders' LTV segments under this message, for cost allocation
        (udfs/ltv/allocation.py)."""
        return OrderSegmenter(self.model, self.horizon_days, self.discount_rate,
                              self.bounds, self.names)


def allocation_model(path: str) -> OrderSegmenter:
    """The segmenter of the model message in the file at `path` (`roi.ltv_model`);
    ValueError naming the file and what is wrong with it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the LTV model message {path}: {error.strerror or error}"
                         ) from None
    try:
        return ModelMessage.from_json(text).segmenter()
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
