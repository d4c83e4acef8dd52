"""The incrementality rows (schemas/rows.py lists them in ROWS): each lift test's measure,
each channel's calibration factor per model, and ROI per channel calibrated beside
uncalibrated. Written by `seedance incrementality`; definitions: docs/incrementality.md.
"""

from __future__ import annotations

from schemas.row_layout import Column, Row

LIFT_TEST = Row(
    "lift_test",
    "What a lift test measured of one channel: a holdout flag's exposed against held-out "
    "users, or a study from a file; incremental conversions or revenue in the exposed "
    "users, with its interval.",
    (Column("test_id", "string", "the holdout's flag, or study:<channel>:<start>:<source>"),
     Column("metric", "string", "conversions | revenue"),
     Column("channel", "string"),
     Column("source", "string", "holdout, or where a study came from"),
     Column("start_day", "date", "first day of the test (UTC)"),
     Column("end_day", "date", "last day of the test (UTC)"),
     Column("exposed_users", "bigint", "null for a study", nullable=True),
     Column("held_out_users", "bigint", "null for a study", nullable=True),
     Column("incremental", "double", "caused in the exposed users"),
     Column("low", "double"),
     Column("high", "double"),
     Column("level", "double", "the interval's level, e.g. 0.95"),
     Column("cost_saving", "double", "the channel's ad spend not spent on the held-out "
            "users: its spend per exposed user over the test's days times the held-out "
            "users; null for a study", nullable=True),
     Column("computed_at", "string", "ISO 8601 UTC")),
    key=("test_id", "metric"), table="lift_tests")

CALIBRATION_FACTOR = Row(
    "calibration_factor",
    "A channel's calibration under one model: its latest lift test's incremental figure "
    "over what the model credited it in the test's users and period.",
    (Column("model", "string"),
     Column("channel", "string"),
     Column("metric", "string", "conversions | revenue"),
     Column("test_id", "string"),
     Column("credited", "double"),
     Column("incremental", "double"),
     Column("factor", "double", "max(incremental, 0) / credited"),
     Column("low", "double"),
     Column("high", "double"),
     Column("end_day", "date", "the test's last day"),
     Column("age_days", "bigint", "days from the test's end to the report's last day")),
    key=("model", "channel", "metric"), table="calibration_factors")

ROI_CALIBRATED = Row(
    "roi_calibrated",
    "ROI per model and channel over a window, uncalibrated (roi_daily) beside calibrated "
    "by lift tests; the (baseline) row holds what the calibrated channels leave, so each "
    "model's calibrated conversions and revenue add up to its uncalibrated ones.",
    (Column("model", "string"),
     Column("channel", "string", "or (baseline)"),
     Column("first_day", "date"),
     Column("last_day", "date"),
     Column("conversions", "double"),
     Column("calibrated_conversions", "double"),
     Column("calibrated_conversions_low", "double"),
     Column("calibrated_conversions_high", "double"),
     Column("revenue", "double"),
     Column("calibrated_revenue", "double"),
     Column("calibrated_revenue_low", "double"),
     Column("calibrated_revenue_high", "double"),
     Column("cost", "double", "allocated ad spend + compute (the same either way)"),
     Column("ad_spend", "double"),
     Column("roi", "double", "revenue / cost; null under roi.min_cost", nullable=True),
     Column("calibrated_roi", "double", nullable=True),
     Column("calibrated_roi_low", "double", nullable=True),
     Column("calibrated_roi_high", "double", nullable=True),
     Column("roas", "double", "revenue / ad spend; null without ad spend", nullable=True),
     Column("calibrated_roas", "double", nullable=True),
     Column("test_id", "string", "the test its factor comes from; '' when untested"),
     Column("age_days", "bigint", "its age; null when untested", nullable=True),
     Column("currency", "string")),
    key=("model", "channel"), table="roi_calibrated")

INCREMENTALITY_ROWS = (LIFT_TEST, CALIBRATION_FACTOR, ROI_CALIBRATED)
