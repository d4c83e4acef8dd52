"""Sections of the streaming job's config (job_config.py) beyond the engines': the orders
table's change stream, the experiments, incrementality and LTV. Each key is documented in
jobs/config/streaming.yaml."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OrderChangesConfig:
    # the orders table's change stream (Debezium change events, or plain JSON rows of the
    # orders: docs/order-changes.md); empty: orders come from spans alone
    topic: str = ""
    # the YAML mapping of the table's columns (relative to the config file's folder)
    mapping: str = ""
    # how long after an order its changes (a refund, a corrected amount) still correct its
    # credits: each credited order's rows are kept this long (roi.retention_days bounds
    # how far back the ROI figures follow)
    window_days: float = 40.0


@dataclass(frozen=True)
class ExperimentsConfig:
    # a user's first exposure to a flag is remembered this long after their last activity
    retention_days: float = 90.0
    # whose allocated ad spend and compute an exposed user's orders carry (empty: last_click
    # when it runs, else the first of attribution.models)
    cost_model: str = ""
    window_days: float = 7.0  # the strategy table's window
    alpha: float = 0.05  # significance level of the difference to control
    # arms with fewer converting users get no interval and no verdict
    min_converters: int = 30
    # the variant the others are compared with ('': the first in sorted order)
    control_variant: str = "control"


@dataclass(frozen=True)
class IncrementalityConfig:
    # a channel's holdout test is an experiment on the flag <holdout_prefix><channel>
    # whose users see the channel (exposed_variant) or are kept from it (held_out_variant)
    holdout_prefix: str = "holdout."
    exposed_variant: str = "exposed"
    held_out_variant: str = "held_out"
    # lift studies measured elsewhere (an ad platform's lift report): a CSV file, relative
    # to the config file's folder (docs/incrementality.md); empty: none
    studies: str = ""


@dataclass(frozen=True)
class LtvConfig:
    # what a model fitted for the stream is fitted and published with (the model message,
    # pipelines/codec/ltv_models.py, carries them; the stream scores by the message)
    period_days: float = 7.0  # the models' time unit
    horizon_days: int = 365  # the LTV horizon after the as-of day
    discount_rate: float = 0.0  # per period
