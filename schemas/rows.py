"""The result rows, each declared once: its columns in order, with a logical type.

The jobs write these rows to the result topics, the loader and the backfill store them in
the warehouse (schemas/sql/*.sql, whose tables must have exactly these columns: a unit test
compares them; the LTV rows are in schemas/ltv_rows.py, the reconciliation's in
schemas/reconcile_rows.py, the control loop's in schemas/control_rows.py), the dashboard
reads them back. Consumers derive what they need from a declaration -- a tuple of names,
a Spark DDL string, pandas dtypes -- instead of keeping a copy of the layout
(schemas/row_layout.py says how).
"""

from __future__ import annotations

from schemas.control_rows import CONTROL_ACTION, CONTROL_DECISION, CONTROL_VERIFICATION
from schemas.incrementality_rows import (  # noqa: F401
    CALIBRATION_FACTOR,
    INCREMENTALITY_ROWS,
    LIFT_TEST,
    ROI_CALIBRATED,
)
from schemas.ltv_rows import (  # noqa: F401
    CUSTOMER_LTV,
    LTV_CALIBRATION,
    LTV_RETURN,
    LTV_ROWS,
    ORDER_SEGMENT,
)
from schemas.reconcile_rows import RECONCILE_ROWS
from schemas.row_layout import (  # noqa: F401 (Column and Row are part of this module's API)
    PANDAS_DTYPES,
    SPARK_TYPES,
    SQL_TYPES,
    Column,
    Row,
    Type,
)

# -- credits ------------------------------------------------------------------------------
CREDIT = Row(
    "credit",
    "One touch's share of one conversion under one attribution model: a row of the "
    "credits topic (schemas.records.Credit). The credits of a conversion sum to 1 per model.",
    (Column("model", "string", "attribution model"),
     Column("order_id", "string"),
     Column("user_id", "string", "'' when the order had no resolvable user"),
     Column("conversion_ts_ms", "bigint", "order time, ms since epoch (UTC)"),
     Column("touch_index", "bigint", "position in the journey, 0 = first"),
     Column("channel", "string", "'(unattributed)' if no touch in the lookback"),
     Column("campaign", "string"),
     Column("touch_ts_ms", "bigint"),
     Column("credit", "double", "share of the conversion, 0..1"),
     Column("revenue", "double", "credit x order revenue"),
     Column("currency", "string"),
     Column("stage", "string", "lifecycle stage: new|repeat|winback|unknown")),
    key=("model", "order_id", "touch_index"))

ATTRIBUTION_CREDITS = CREDIT.derive(
    "attribution_credits",
    "Credit rows as the warehouse stores them, with the order's day.",
    ("model", "order_id", "touch_index", "user_id", "conversion_ts_ms",
     Column("conversion_date", "date", "order day (UTC)"),
     "channel", "campaign", "touch_ts_ms", "credit", "revenue", "currency", "stage"),
    key=("model", "order_id", "touch_index"), table="attribution_credits")

BACKFILL_CREDIT = CREDIT.derive(
    "backfill_credit",
    "Credit rows as the backfill computes them, with the order's day (its partition).",
    (*CREDIT.names, Column("day", "date", "order day (UTC)")), key=CREDIT.key)

# -- conversions --------------------------------------------------------------------------
CONVERSION = Row(
    "conversion",
    "One order as the conversions topic carries it: what the ROI job needs to bring "
    "compute cost to it (the traces of its journey, the order's own first) and to count it.",
    (Column("order_id", "string"),
     Column("user_id", "string"),
     Column("conversion_ts_ms", "bigint"),
     Column("revenue", "double"),
     Column("currency", "string"),
     Column("stage", "string"),
     Column("touches", "bigint", "touches in the journey"),
     Column("trace_ids", "array<string>", "the order's trace, then its touches' traces")),
    key=("order_id",))

CONVERSIONS_TABLE = CONVERSION.derive(
    "conversions",
    "Each order as the attribution job last reported it (conversions topic): its revenue "
    "net of refunds, what every model's credited revenue ties to (`seedance verify`).",
    ("order_id", "user_id", "conversion_ts_ms",
     Column("conversion_date", "date", "order day (UTC)"), "revenue", "currency", "stage",
     "touches"),
    key=("order_id",), table="conversions")

# -- ad spend and ROI ---------------------------------------------------------------------
AD_SPEND = Row(
    "ad_spend",
    "Ad spend as a platform reports it, one row per campaign-day (ad_spend topic; "
    "pipelines.sources.ad_spend.SpendRecord). A restatement replaces the row.",
    (Column("platform", "string", "google_ads, meta, ... (lower case)"),
     Column("account", "string", "the platform's account / customer id"),
     Column("campaign", "string", "matches marketing.campaign on the touches"),
     Column("day", "date", "the platform's reporting day"),
     Column("amount", "double"),
     Column("currency", "string")),
    key=("platform", "account", "campaign", "day"), table="ad_spend")

ROI_DAILY = Row(
    "roi_daily",
    "ROI per model and day by channel, campaign and lifecycle stage (roi topic, "
    "kind=roi), with the ratios finance reads (udfs/ratios.py): ROAS, margin ROI and "
    "revenue per unit of cost, each None on a cost under roi.min_cost. A day reported "
    "again wins.",
    (Column("model", "string"),
     Column("day", "date", "day of the conversions (UTC)"),
     Column("dimension", "string", "channel | campaign | stage"),
     Column("key", "string", "the channel, campaign or stage"),
     Column("conversions", "double", "credited conversions"),
     Column("revenue", "double"),
     Column("ad_spend", "double"),
     Column("compute_cost", "double"),
     Column("roi", "double", "revenue / (ad_spend + compute_cost): revenue per unit of cost",
            nullable=True),
     Column("currency", "string"),
     Column("roas", "double", "revenue / ad_spend", nullable=True),
     Column("margin_roi", "double", "(revenue x roi.gross_margin - cost) / cost",
            nullable=True)),
    key=("model", "day", "dimension", "key"), table="roi_daily")

ROI_UNALLOCATED = Row(
    "roi_unallocated",
    "Cost no conversion took that day (roi topic, kind=unallocated): spend of a campaign "
    "the model credited nothing to, GPU cost of traces no journey carried. Amount 0 "
    "withdraws a key reported before.",
    (Column("model", "string"),
     Column("day", "date"),
     Column("cost_kind", "string", "ad_spend | compute"),
     Column("key", "string", "the campaign; '' for compute"),
     Column("amount", "double"),
     Column("currency", "string")),
    key=("model", "day", "cost_kind", "key"), table="roi_unallocated")

ROI_DAY_CLOSED = Row(
    "roi_day_closed",
    "A day the ROI job has closed (roi topic, kind=day_closed): `rows` once its watermark "
    "passed the day's end (the day's revenue, spend and credits reported), `compute` once it "
    "also passed roi.link_window_days after it (every GPU cost of the day on an order or "
    "unallocated). Later input still restates a closed day; `seedance verify` judges the "
    "ties of closed days only.",
    (Column("day", "date", "the day (UTC)"),
     Column("part", "string", "rows | compute"),
     Column("watermark_ms", "bigint", "the job's event time when it closed the part")),
    key=("day", "part"), table="roi_days_closed")

# -- GPU cost -----------------------------------------------------------------------------
GPU_CALL_COST = Row(
    "gpu_call_cost",
    "GPU cost of one GPU-backed call in one priced interval (gpu_costs topic, kind=call).",
    (Column("gpu_uuid", "string"),
     Column("interval_end_ms", "bigint"),
     Column("trace_id", "string"),
     Column("span_id", "string"),
     Column("interval_start_ms", "bigint"),
     Column("model", "string", "the GPU's model"),
     Column("workload", "string"),
     Column("pod", "string"),
     Column("namespace", "string"),
     Column("user_id", "string"),
     Column("gpu_seconds", "double"),
     Column("cost_usd", "double"),
     Column("interval_cost_usd", "double", "the whole interval's cost (calls + idle)"),
     Column("price_known", "boolean", "false: priced at the catalog's fallback")),
    key=("gpu_uuid", "interval_end_ms", "trace_id", "span_id"), table="gpu_call_costs")

GPU_IDLE_COST = Row(
    "gpu_idle_cost",
    "Idle GPU time and its cost in one priced interval (gpu_costs topic, kind=idle).",
    (Column("gpu_uuid", "string"),
     Column("interval_end_ms", "bigint"),
     Column("interval_start_ms", "bigint"),
     Column("model", "string"),
     Column("idle_seconds", "double"),
     Column("cost_usd", "double"),
     Column("interval_cost_usd", "double"),
     Column("price_known", "boolean")),
    key=("gpu_uuid", "interval_end_ms"), table="gpu_idle_costs")

# -- bookkeeping --------------------------------------------------------------------------
KAFKA_OFFSET = Row(
    "kafka_offset",
    "A topic partition's next offset to load, committed with the rows it carried.",
    (Column("consumer", "string"),
     Column("topic", "string"),
     Column("partition", "bigint"),
     Column("next_offset", "bigint")),
    key=("consumer", "topic", "partition"), table="kafka_offsets")

BACKFILL_RUN = Row(
    "backfill_run",
    "A day a backfill run replaced, written with the day's rows (resume after a failure).",
    (Column("run_id", "string"),
     Column("day", "date"),
     Column("source", "string", "archive | kafka"),
     Column("engine", "string", "spark | pandas"),
     Column("credits", "bigint"),
     Column("roi_rows", "bigint"),
     Column("unallocated_rows", "bigint"),
     Column("finished_at", "string", "ISO 8601 UTC")),
    key=("run_id", "day"), table="backfill_runs")

ACCOUNTING = Row(
    "accounting",
    "The attribution job's run accounting (run_accounting topic): what became of every "
    "input record; records_in = processed + dead_lettered + late + other.",
    (Column("job", "string"),
     Column("messages", "bigint"),
     Column("records_in", "bigint"),
     Column("used", "bigint", "touches and orders"),
     Column("other", "bigint", "spans this job has no use for"),
     Column("dead_lettered", "bigint"),
     Column("late", "bigint"),
     Column("other_gpu_calls", "bigint"),
     Column("other_tracing_spans", "bigint"),
     Column("duplicate_orders", "bigint"),
     Column("expired", "bigint", "of the late: arrived in time, but behind the state the "
            "job keeps (an alarm: lost, not late)"),
     Column("processed", "bigint", "used - late - duplicate_orders"),
     Column("final", "boolean", "the end of a bounded input")),
    key=("job",))

DEAD_LETTER = Row(
    "dead_letter",
    "Input that could not be used (dead-letter topic; pipelines.codec.dead_letters."
    "dead_letter_json): the reason and the original bytes.",
    (Column("reason", "string"),
     Column("detail", "string"),
     Column("source", "string", "the topic it came from"),
     Column("partition", "bigint", "absent when unknown", nullable=True),
     Column("offset", "bigint", "absent when unknown", nullable=True),
     Column("payload_bytes", "bigint"),
     Column("payload_truncated", "boolean"),
     Column("payload_base64", "string")))

LOAD_REJECT = Row(
    "load_reject",
    "A result-topic message the warehouse loader could not store (a value the database "
    "refuses, a row missing a field): set aside with its place and the reason, so one bad "
    "message never stops the loading of the rest.",
    (Column("consumer", "string"),
     Column("topic", "string"),
     Column("partition", "bigint"),
     Column("message_offset", "bigint", "the message's offset in its partition"),
     Column("reason", "string"),
     Column("payload_base64", "string", "the message, cut at 65,536 bytes"),
     Column("rejected_at", "string", "ISO 8601 UTC")),
    key=("consumer", "topic", "partition", "message_offset"), table="load_rejects")

# -- per-order costs and experiments -------------------------------------------------------
ORDER_COST = Row(
    "order_cost",
    "What one order earned and what it was allocated, under one model (roi topic, "
    "kind=order_cost; the experiments' cost model): its revenue, its share of the day's ad "
    "spend and of the GPU compute its journey used.",
    (Column("model", "string"),
     Column("day", "date", "day of the order (UTC)"),
     Column("order_id", "string"),
     Column("revenue", "double"),
     Column("ad_spend", "double"),
     Column("compute_cost", "double"),
     Column("currency", "string")),
    key=("model", "day", "order_id"), table="order_costs")

EXPERIMENT_EXPOSURE = Row(
    "experiment_exposure",
    "A user's first exposure to a feature flag (experiment_exposures topic): the variant "
    "they keep for the experiment.",
    (Column("flag_key", "string", "the experiment's feature flag"),
     Column("user_id", "string"),
     Column("variant", "string"),
     Column("first_exposure_ms", "bigint"),
     Column("trace_id", "string", "the exposure span's trace")),
    key=("flag_key", "user_id"), table="experiment_exposures")

EXPERIMENT_CONVERSION = Row(
    "experiment_conversion",
    "An order of an exposed user after their first exposure (experiment_conversions "
    "topic), counted for the variant they saw.",
    (Column("flag_key", "string"),
     Column("order_id", "string"),
     Column("variant", "string"),
     Column("user_id", "string"),
     Column("conversion_ts_ms", "bigint"),
     Column("revenue", "double"),
     Column("currency", "string"),
     Column("stage", "string"),
     Column("first_exposure_ms", "bigint")),
    key=("flag_key", "order_id"), table="experiment_conversions")

EXPERIMENT_RESULT = Row(
    "experiment_result",
    "One variant of one experiment over a window, as `seedance experiments` computed it "
    "(udfs/experiments/statistics.py): ROI with its interval, the difference to control, its "
    "significance, the marginal cost and the sample-ratio check; what the dashboard shows.",
    (Column("flag_key", "string"),
     Column("variant", "string"),
     Column("window_end", "date", "the window's last day (UTC)"),
     Column("window_start", "date"),
     Column("is_control", "boolean"),
     Column("control_variant", "string", "'' when the experiment has none"),
     Column("users", "bigint", "first exposed inside the window"),
     Column("converters", "bigint"),
     Column("conversions", "bigint"),
     Column("revenue", "double"),
     Column("ad_spend", "double"),
     Column("compute_cost", "double"),
     Column("roi", "double", nullable=True),
     Column("roi_low", "double", nullable=True),
     Column("roi_high", "double", nullable=True),
     Column("roi_diff", "double", "ROI minus the control's", nullable=True),
     Column("diff_low", "double", nullable=True),
     Column("diff_high", "double", nullable=True),
     Column("p_value", "double", nullable=True),
     Column("significant", "boolean"),
     Column("marginal_cost", "double", "cost per user vs the control's, minus 1",
            nullable=True),
     Column("srm_p_value", "double", nullable=True),
     Column("srm", "boolean", "sample-ratio mismatch"),
     Column("confidence", "double", "the intervals' level"),
     Column("computed_at", "string", "ISO 8601 UTC"),
     Column("heavy_tail", "boolean", "the top 1 % of buyers hold over half the revenue"),
     Column("note", "string", "why there is no verdict, or what to read with care")),
    key=("flag_key", "variant", "window_end"), table="experiment_results")

# -- credit intervals ----------------------------------------------------------------------
CREDIT_INTERVAL = Row(
    "credit_interval",
    "How sure a channel's credit is: per model, period and channel the credited "
    "conversions, revenue and share of the model's conversions, each with a bootstrap "
    "interval over the period's conversions (udfs/attribution/intervals.py, seeded).",
    (Column("model", "string"),
     Column("period", "date", "the day of the conversions (UTC)"),
     Column("channel", "string"),
     Column("credit", "double", "credited conversions"),
     Column("credit_low", "double"),
     Column("credit_high", "double"),
     Column("revenue", "double"),
     Column("revenue_low", "double"),
     Column("revenue_high", "double"),
     Column("share", "double", "of the model's credited conversions that period"),
     Column("share_low", "double"),
     Column("share_high", "double"),
     Column("level", "double", "the intervals' confidence level"),
     Column("resamples", "bigint"),
     Column("seed", "bigint"),
     Column("computed_at", "string", "ISO 8601 UTC")),
    key=("model", "period", "channel"), table="credit_intervals")

ROWS: tuple[Row, ...] = (CREDIT, ATTRIBUTION_CREDITS, BACKFILL_CREDIT, CONVERSION,
                         CONVERSIONS_TABLE, AD_SPEND,
                         ROI_DAILY, ROI_UNALLOCATED, ROI_DAY_CLOSED, GPU_CALL_COST,
                         GPU_IDLE_COST, KAFKA_OFFSET, BACKFILL_RUN, ACCOUNTING, DEAD_LETTER,
                         LOAD_REJECT, ORDER_COST,
                         EXPERIMENT_EXPOSURE, EXPERIMENT_CONVERSION, EXPERIMENT_RESULT,
                         CREDIT_INTERVAL, CONTROL_DECISION, CONTROL_ACTION,
                         CONTROL_VERIFICATION, *LTV_ROWS, *RECONCILE_ROWS,
                         *INCREMENTALITY_ROWS)
TABLES: dict[str, Row] = {row.table: row for row in ROWS if row.table}
