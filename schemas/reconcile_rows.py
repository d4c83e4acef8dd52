"""The reconciliation's rows (schemas/rows.py lists them in ROWS): billing data as the ad
platforms and cloud bills report it, our numbers against theirs per day, the alert events
and the runs. Their tables are schemas/sql/reconciliation.sql's, written by
pipelines/reconcile/store.py alone (`seedance reconcile` and `seedance verify`).
Definitions: docs/reconciliation.md.
"""

from __future__ import annotations

from schemas.row_layout import Column, Row

BILLING_AD_ROW = Row(
    "billing_ad_row",
    "A campaign-day as an ad platform reports it; a restated report replaces the row only "
    "if it was taken later (reported_at).",
    (Column("platform", "string", "google_ads, meta, or a generic file's"),
     Column("account", "string"),
     Column("campaign", "string"),
     Column("day", "date", "in the account's time zone"),
     Column("currency", "string"),
     Column("spend", "double", "None: the report does not carry it", nullable=True),
     Column("conversions", "double", nullable=True),
     Column("revenue", "double", nullable=True),
     Column("time_zone", "string", "the account's zone if the report says"),
     Column("attribution_window", "string"),
     Column("date_basis", "string", "interaction | conversion"),
     Column("source", "string", "file:line or topic[partition]@offset"),
     Column("reported_at", "string", "ISO 8601 UTC")),
    key=("platform", "account", "campaign", "day"), table="billing_ad_rows")

BILLING_CLOUD_COST = Row(
    "billing_cloud_cost",
    "FOCUS cloud bills: EffectiveCost per billing period, resource, charge day and category, "
    "per file or message it came in; a later export of a period replaces all its rows.",
    (Column("billing_account", "string"),
     Column("billing_period_start", "date"),
     Column("resource_id", "string"),
     Column("day", "date", "the charge day (UTC)"),
     Column("charge_category", "string"),
     Column("source", "string"),
     Column("currency", "string"),
     Column("cost", "double", "corrections included"),
     Column("correction_cost", "double", "of the cost, ChargeClass=Correction"),
     Column("lines", "bigint"),
     Column("provider", "string"),
     Column("reported_at", "string", "ISO 8601 UTC")),
    key=("billing_account", "billing_period_start", "resource_id", "day", "charge_category",
         "source"), table="billing_cloud_costs")

RECONCILIATION_DAILY = Row(
    "reconciliation_daily",
    "Our number against the billing source's (or one internal total against another: scope "
    "'internal', `seedance verify`) per key, day and metric; a rerun of a day replaces its "
    "rows.",
    (Column("scope", "string", "campaign | gpu | total | internal"),
     Column("platform", "string"),
     Column("account", "string"),
     Column("entity", "string", "campaign id, FOCUS ResourceId, '*'"),
     Column("day", "date"),
     Column("metric", "string"),
     Column("currency", "string", "the billing source's; '' for conversions"),
     Column("ours", "double", "None: no row on our side", nullable=True),
     Column("theirs", "double", "None: no row in the billing source", nullable=True),
     Column("difference", "double", "ours - theirs, None counted as 0"),
     Column("drift", "double", "(ours - theirs) / |theirs|; None if theirs is 0",
            nullable=True),
     Column("threshold", "double"),
     Column("min_volume", "double"),
     Column("status", "string", "ok | breach | below_min_volume | no_report"),
     Column("contributors", "string", "JSON list of {name, ours, theirs}"),
     Column("billing_source", "string", "where their number came from"),
     Column("reported_at", "string", "the restatement it came from")),
    key=("scope", "platform", "account", "entity", "day", "metric"),
    table="reconciliation_daily")

ALERT = Row(
    "alert",
    "An alert event: a breach opens one per key and day (seq 1, 2 after a resolve), a run "
    "back under the threshold resolves it; the *_status columns say which sinks it reached.",
    (Column("alert_id", "string", "stable: key, day, seq, kind"),
     Column("kind", "string", "open | resolve"),
     Column("scope", "string"),
     Column("platform", "string"),
     Column("account", "string"),
     Column("entity", "string"),
     Column("day", "date"),
     Column("metric", "string"),
     Column("seq", "bigint"),
     Column("currency", "string"),
     Column("ours", "double", nullable=True),
     Column("theirs", "double", nullable=True),
     Column("drift", "double", "None: theirs is 0 (infinite drift)", nullable=True),
     Column("threshold", "double"),
     Column("min_volume", "double"),
     Column("contributors", "string", "JSON, as in reconciliation_daily"),
     Column("run_id", "string"),
     Column("raised_at", "string", "ISO 8601 UTC"),
     Column("log_status", "string", "pending | sent | disabled"),
     Column("kafka_status", "string", "pending | sent | failed | disabled"),
     Column("webhook_status", "string", "pending | sent | failed | rejected | disabled"),
     Column("webhook_attempts", "bigint"),
     Column("last_error", "string")),
    key=("alert_id",), table="alerts")

RECONCILIATION_RUN = Row(
    "reconciliation_run",
    "One run of `seedance reconcile`, for the audit trail.",
    (Column("run_id", "string"),
     Column("started_at", "string", "ISO 8601 UTC"),
     Column("finished_at", "string", "'' while running"),
     Column("day_from", "date"),
     Column("day_to", "date"),
     Column("runner", "string"),
     Column("status", "string", "running | done | failed"),
     Column("rows_written", "bigint"),
     Column("breaches", "bigint"),
     Column("opened", "bigint"),
     Column("resolved", "bigint"),
     Column("detail", "string")),
    key=("run_id",), table="reconciliation_runs")

RECONCILE_ROWS: tuple[Row, ...] = (BILLING_AD_ROW, BILLING_CLOUD_COST, RECONCILIATION_DAILY,
                                   ALERT, RECONCILIATION_RUN)
