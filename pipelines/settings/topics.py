"""The streaming jobs' topic names and their defaults (the job config's `topics:` section,
pipelines/settings/job_config.py): kept apart from the rest of the job config so that a
light module, such as the span exporter an application imports, can read a default without
importing what the job config needs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicsConfig:
    spans: str = "otlp_spans"
    credits: str = "attribution_credits"
    dead_letter: str = "otlp_spans_dlq"
    late: str = "late_events"
    conversions: str = "conversions"
    ad_spend: str = "ad_spend"
    roi_dead_letter: str = "roi_inputs_dlq"
    roi: str = "roi_daily"
    accounting: str = "run_accounting"
    experiment_exposures: str = "experiment_exposures"
    experiment_conversions: str = "experiment_conversions"
    ltv_models: str = "ltv_models"
    customer_ltv: str = "customer_ltv"
    ltv_dead_letter: str = "ltv_inputs_dlq"
