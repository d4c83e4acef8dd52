-- Warehouse tables read by the finance dashboards. Portable SQL: runs on the embedded
-- SQLite default and on PostgreSQL. Loaded by pipelines/store/warehouse.py.

-- One row per (model, order, touch): that touch's share of the order under that model.
-- The credits of one order under one model sum to 1 and to the order's revenue.
CREATE TABLE IF NOT EXISTS attribution_credits (
    model             TEXT             NOT NULL,
    order_id          TEXT             NOT NULL,
    touch_index       INTEGER          NOT NULL,  -- position in the journey, 0 = first
    user_id           TEXT             NOT NULL,  -- '' when the order had no resolvable user
    conversion_ts_ms  BIGINT           NOT NULL,  -- order time, ms since epoch (UTC)
    conversion_date   TEXT             NOT NULL,  -- order day, YYYY-MM-DD (UTC)
    channel           TEXT             NOT NULL,  -- '(unattributed)' if no touch in lookback
    campaign          TEXT             NOT NULL,
    touch_ts_ms       BIGINT           NOT NULL,
    credit            DOUBLE PRECISION NOT NULL,  -- share of the conversion, 0..1
    revenue           DOUBLE PRECISION NOT NULL,  -- credit x order revenue
    currency          TEXT             NOT NULL,
    stage             TEXT             NOT NULL DEFAULT 'unknown',  -- new|repeat|winback|unknown
    PRIMARY KEY (model, order_id, touch_index)
);

-- each order as the attribution job last reported it (conversions topic): its revenue net
-- of refunds (order_changes), what each model's credited revenue ties to (seedance verify)
CREATE TABLE IF NOT EXISTS conversions (
    order_id          TEXT             NOT NULL,
    user_id           TEXT             NOT NULL,
    conversion_ts_ms  BIGINT           NOT NULL,  -- order time, ms since epoch (UTC)
    conversion_date   TEXT             NOT NULL,  -- order day, YYYY-MM-DD (UTC)
    revenue           DOUBLE PRECISION NOT NULL,  -- net of refunds
    currency          TEXT             NOT NULL,
    stage             TEXT             NOT NULL,  -- new|repeat|winback|unknown
    touches           BIGINT           NOT NULL,  -- touches in the journey
    PRIMARY KEY (order_id)
);

CREATE INDEX IF NOT EXISTS attribution_credits_by_day
    ON attribution_credits (conversion_date, model, channel);

-- Kafka offsets already loaded, committed in the same transaction as the rows they
-- carried: a restarted loader resumes exactly where the last commit ended.
CREATE TABLE IF NOT EXISTS kafka_offsets (
    consumer    TEXT    NOT NULL,
    topic       TEXT    NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset BIGINT  NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);

-- Result-topic messages the loader (or the control loop) could not use, set aside with
-- their place and the reason (the loader commits them with the offsets, like the rows).
CREATE TABLE IF NOT EXISTS load_rejects (
    consumer       TEXT    NOT NULL,
    topic          TEXT    NOT NULL,
    partition      BIGINT  NOT NULL,
    message_offset BIGINT  NOT NULL,
    reason         TEXT    NOT NULL,
    payload_base64 TEXT    NOT NULL,
    rejected_at    TEXT    NOT NULL,
    PRIMARY KEY (consumer, topic, partition, message_offset)
);

-- GPU cost of each GPU-backed call in each priced interval (gpu_costs topic, kind=call).
-- Sum by span_id, trace_id, workload or user_id for cost per call, trace, workload, user.
CREATE TABLE IF NOT EXISTS gpu_call_costs (
    gpu_uuid          TEXT             NOT NULL,
    interval_end_ms   BIGINT           NOT NULL,
    trace_id          TEXT             NOT NULL,
    span_id           TEXT             NOT NULL,
    interval_start_ms BIGINT           NOT NULL,
    model             TEXT             NOT NULL,
    workload          TEXT             NOT NULL,
    pod               TEXT             NOT NULL,
    namespace         TEXT             NOT NULL,
    user_id           TEXT             NOT NULL,
    gpu_seconds       DOUBLE PRECISION NOT NULL,
    cost_usd          DOUBLE PRECISION NOT NULL,
    interval_cost_usd DOUBLE PRECISION NOT NULL,  -- the whole interval's cost (calls + idle)
    price_known       BOOLEAN          NOT NULL,  -- false: fallback price (unknown model)
    PRIMARY KEY (gpu_uuid, interval_end_ms, trace_id, span_id)
);

-- Idle GPU time and its cost per priced interval (kind=idle). Per interval:
-- sum(gpu_call_costs.cost_usd) + gpu_idle_costs.cost_usd = interval_cost_usd.
CREATE TABLE IF NOT EXISTS gpu_idle_costs (
    gpu_uuid          TEXT             NOT NULL,
    interval_end_ms   BIGINT           NOT NULL,
    interval_start_ms BIGINT           NOT NULL,
    model             TEXT             NOT NULL,
    idle_seconds      DOUBLE PRECISION NOT NULL,
    cost_usd          DOUBLE PRECISION NOT NULL,
    interval_cost_usd DOUBLE PRECISION NOT NULL,
    price_known       BOOLEAN          NOT NULL,
    PRIMARY KEY (gpu_uuid, interval_end_ms)
);

-- Ad spend as the platforms report it (ad_spend topic), one row per campaign-day.
-- A restated report replaces the row: the latest restatement wins.
CREATE TABLE IF NOT EXISTS ad_spend (
    platform  TEXT             NOT NULL,  -- google_ads, meta, ... (free text, lower case)
    account   TEXT             NOT NULL,  -- the platform's account / customer id
    campaign  TEXT             NOT NULL,  -- matches marketing.campaign on the touches
    day       TEXT             NOT NULL,  -- YYYY-MM-DD, the platform's reporting day
    amount    DOUBLE PRECISION NOT NULL,
    currency  TEXT             NOT NULL,
    PRIMARY KEY (platform, account, campaign, day)
);

-- ROI per model and day, by channel, campaign and lifecycle stage (roi_daily topic, kind=roi).
-- revenue = attributed revenue; ad_spend = the campaign-day's spend split over its credited
-- conversions by credit x stage weight; compute_cost = GPU cost of the traces in each
-- conversion's journey, split by credit. roi = revenue / (ad_spend + compute_cost), NULL
-- when there is no cost. A day is reported again when late input arrives: latest wins.
CREATE TABLE IF NOT EXISTS roi_daily (
    model         TEXT             NOT NULL,
    day           TEXT             NOT NULL,  -- YYYY-MM-DD (UTC) of the conversions
    dimension     TEXT             NOT NULL,  -- channel | campaign | stage
    key           TEXT             NOT NULL,  -- the channel, campaign or stage
    conversions   DOUBLE PRECISION NOT NULL,  -- credited conversions
    revenue       DOUBLE PRECISION NOT NULL,
    ad_spend      DOUBLE PRECISION NOT NULL,
    compute_cost  DOUBLE PRECISION NOT NULL,
    roi           DOUBLE PRECISION,           -- revenue / cost; NULL under roi.min_cost
    currency      TEXT             NOT NULL,
    roas          DOUBLE PRECISION,           -- revenue / ad spend; NULL under roi.min_cost
    margin_roi    DOUBLE PRECISION,           -- (revenue x gross margin - cost) / cost
    PRIMARY KEY (model, day, dimension, key)
);

-- Cost that could not be allocated that day (kind=unallocated): spend of a campaign the
-- model credited nothing to (cost_kind ad_spend, key = campaign), GPU cost of traces no
-- conversion's journey carried (cost_kind compute). Per model and day:
-- SUM(roi_daily.ad_spend WHERE dimension = 'channel') + SUM(amount WHERE ad_spend) = spend in.
CREATE TABLE IF NOT EXISTS roi_unallocated (
    model      TEXT             NOT NULL,
    day        TEXT             NOT NULL,
    cost_kind  TEXT             NOT NULL,  -- ad_spend | compute
    key        TEXT             NOT NULL,
    amount     DOUBLE PRECISION NOT NULL,
    currency   TEXT             NOT NULL,
    PRIMARY KEY (model, day, cost_kind, key)
);

-- The days the ROI job has closed (roi topic, kind=day_closed): part `rows` once its
-- watermark passed the day's end, `compute` once it passed roi.link_window_days after that
-- too (every GPU cost of the day placed). `seedance verify` tells these days' ties from
-- those of days still open; a warehouse without rows here is checked as before.
CREATE TABLE IF NOT EXISTS roi_days_closed (
    day           TEXT    NOT NULL,  -- YYYY-MM-DD (UTC)
    part          TEXT    NOT NULL,  -- rows | compute
    watermark_ms  BIGINT  NOT NULL,  -- the job's event time when it closed the part
    PRIMARY KEY (day, part)
);

-- Each order's revenue and allocated cost under the experiments' cost model (roi topic,
-- kind=order_cost): what an experiment's ROI is summed from.
CREATE TABLE IF NOT EXISTS order_costs (
    model         TEXT             NOT NULL,
    day           TEXT             NOT NULL,  -- YYYY-MM-DD (UTC) of the order
    order_id      TEXT             NOT NULL,
    revenue       DOUBLE PRECISION NOT NULL,
    ad_spend      DOUBLE PRECISION NOT NULL,  -- its share of the day's ad spend
    compute_cost  DOUBLE PRECISION NOT NULL,  -- its share of its journey's GPU compute
    currency      TEXT             NOT NULL,
    PRIMARY KEY (model, day, order_id)
);

-- A user's first exposure to a feature flag: the variant they keep (experiments job).
CREATE TABLE IF NOT EXISTS experiment_exposures (
    flag_key           TEXT   NOT NULL,
    user_id            TEXT   NOT NULL,
    variant            TEXT   NOT NULL,
    first_exposure_ms  BIGINT NOT NULL,
    trace_id           TEXT   NOT NULL,
    PRIMARY KEY (flag_key, user_id)
);

-- Orders of exposed users after their first exposure, per flag (experiments job).
CREATE TABLE IF NOT EXISTS experiment_conversions (
    flag_key           TEXT             NOT NULL,
    order_id           TEXT             NOT NULL,
    variant            TEXT             NOT NULL,
    user_id            TEXT             NOT NULL,
    conversion_ts_ms   BIGINT           NOT NULL,
    revenue            DOUBLE PRECISION NOT NULL,
    currency           TEXT             NOT NULL,
    stage              TEXT             NOT NULL,
    first_exposure_ms  BIGINT           NOT NULL,
    PRIMARY KEY (flag_key, order_id)
);

-- The strategy table: one variant of one experiment over a window (seedance experiments).
CREATE TABLE IF NOT EXISTS experiment_results (
    flag_key         TEXT             NOT NULL,
    variant          TEXT             NOT NULL,
    window_end       TEXT             NOT NULL,  -- YYYY-MM-DD, the window's last day
    window_start     TEXT             NOT NULL,
    is_control       BOOLEAN          NOT NULL,
    control_variant  TEXT             NOT NULL,
    users            BIGINT           NOT NULL,
    converters       BIGINT           NOT NULL,
    conversions      BIGINT           NOT NULL,
    revenue          DOUBLE PRECISION NOT NULL,
    ad_spend         DOUBLE PRECISION NOT NULL,
    compute_cost     DOUBLE PRECISION NOT NULL,
    roi              DOUBLE PRECISION,
    roi_low          DOUBLE PRECISION,
    roi_high         DOUBLE PRECISION,
    roi_diff         DOUBLE PRECISION,
    diff_low         DOUBLE PRECISION,
    diff_high        DOUBLE PRECISION,
    p_value          DOUBLE PRECISION,
    significant      BOOLEAN          NOT NULL,
    marginal_cost    DOUBLE PRECISION,
    srm_p_value      DOUBLE PRECISION,
    srm              BOOLEAN          NOT NULL,
    confidence       DOUBLE PRECISION NOT NULL,
    computed_at      TEXT             NOT NULL,
    heavy_tail       BOOLEAN          NOT NULL DEFAULT FALSE,
    note             TEXT             NOT NULL DEFAULT '',  -- e.g. too few converters
    PRIMARY KEY (flag_key, variant, window_end)
);

-- How sure a channel's credit is: bootstrap intervals per model, day and channel
-- (seedance intervals; udfs/attribution/intervals.py).
CREATE TABLE IF NOT EXISTS credit_intervals (
    model         TEXT             NOT NULL,
    period        TEXT             NOT NULL,  -- YYYY-MM-DD (UTC) of the conversions
    channel       TEXT             NOT NULL,
    credit        DOUBLE PRECISION NOT NULL,
    credit_low    DOUBLE PRECISION NOT NULL,
    credit_high   DOUBLE PRECISION NOT NULL,
    revenue       DOUBLE PRECISION NOT NULL,
    revenue_low   DOUBLE PRECISION NOT NULL,
    revenue_high  DOUBLE PRECISION NOT NULL,
    share         DOUBLE PRECISION NOT NULL,
    share_low     DOUBLE PRECISION NOT NULL,
    share_high    DOUBLE PRECISION NOT NULL,
    level         DOUBLE PRECISION NOT NULL,
    resamples     BIGINT           NOT NULL,
    seed          BIGINT           NOT NULL,
    computed_at   TEXT             NOT NULL,
    PRIMARY KEY (model, period, channel)
);

-- The control loop (seedance control): every decision, action and verification.
CREATE TABLE IF NOT EXISTS control_decisions (
    decision_id  TEXT             NOT NULL,
    rule         TEXT             NOT NULL,
    target       TEXT             NOT NULL,
    action       TEXT             NOT NULL,
    parameters   TEXT             NOT NULL,  -- JSON
    reason       TEXT             NOT NULL,
    status       TEXT             NOT NULL,
    blocked_by   TEXT             NOT NULL,
    mode         TEXT             NOT NULL,
    baseline     DOUBLE PRECISION,
    decided_at   TEXT             NOT NULL,
    PRIMARY KEY (decision_id)
);

CREATE TABLE IF NOT EXISTS control_actions (
    action_id     TEXT   NOT NULL,
    decision_id   TEXT   NOT NULL,
    executor      TEXT   NOT NULL,
    status        TEXT   NOT NULL,
    attempts      BIGINT NOT NULL,
    response      TEXT   NOT NULL,
    executed_at   TEXT   NOT NULL,
    verify_after  TEXT   NOT NULL,
    PRIMARY KEY (action_id)
);

CREATE TABLE IF NOT EXISTS control_verifications (
    action_id       TEXT             NOT NULL,
    status          TEXT             NOT NULL,
    baseline        DOUBLE PRECISION,
    observed        DOUBLE PRECISION,
    change_percent  DOUBLE PRECISION,
    reason          TEXT             NOT NULL,
    verified_at     TEXT             NOT NULL,
    PRIMARY KEY (action_id)
);

-- Lifetime value (pipelines/ltv/report.py; definitions in docs/ltv-return.md). Each refresh
-- replaces the tables. Every customer's summary and score as of a day:
CREATE TABLE IF NOT EXISTS customer_ltv (
    user_id               TEXT             NOT NULL,
    as_of_day             TEXT             NOT NULL,  -- YYYY-MM-DD (UTC)
    frequency             DOUBLE PRECISION NOT NULL,  -- x: repeat purchase days
    recency_days          DOUBLE PRECISION NOT NULL,  -- t_x, in days
    age_days              DOUBLE PRECISION NOT NULL,  -- T, in days
    monetary              DOUBLE PRECISION NOT NULL,  -- mean value of the repeat days
    p_alive               DOUBLE PRECISION NOT NULL,
    expected_purchases    DOUBLE PRECISION NOT NULL,  -- in the horizon
    expected_order_value  DOUBLE PRECISION NOT NULL,
    predicted_ltv         DOUBLE PRECISION NOT NULL,  -- over the horizon
    segment               TEXT             NOT NULL,  -- low | mid | high | top
    horizon_days          BIGINT           NOT NULL,
    fitted_through_day    TEXT             NOT NULL,
    PRIMARY KEY (user_id)
);

-- Each order's customer value as of its day and its LTV segment under the ROI job's
-- allocation model (roi.allocation_weights: ltv_segment; roi topic, kind=order_segment):
CREATE TABLE IF NOT EXISTS order_segments (
    day            TEXT             NOT NULL,  -- YYYY-MM-DD (UTC) of the order
    order_id       TEXT             NOT NULL,
    user_id        TEXT             NOT NULL,
    predicted_ltv  DOUBLE PRECISION,          -- null: no finite value
    segment        TEXT             NOT NULL,  -- the model's segments, or unknown
    PRIMARY KEY (day, order_id)
);

-- The customers each channel or campaign acquired (credited first orders) per attribution
-- model: CAC, first-order ROI and ROI on their predicted value over the horizon, payback.
CREATE TABLE IF NOT EXISTS ltv_return (
    model                 TEXT             NOT NULL,
    dimension             TEXT             NOT NULL,  -- channel | campaign
    key                   TEXT             NOT NULL,
    customers             DOUBLE PRECISION NOT NULL,
    acquisition_cost      DOUBLE PRECISION NOT NULL,
    first_order_revenue   DOUBLE PRECISION NOT NULL,
    predicted_value       DOUBLE PRECISION NOT NULL,
    predicted_value_low   DOUBLE PRECISION,
    predicted_value_high  DOUBLE PRECISION,
    cac                   DOUBLE PRECISION,
    ltv_roi               DOUBLE PRECISION,
    ltv_roi_low           DOUBLE PRECISION,
    ltv_roi_high          DOUBLE PRECISION,
    first_order_roi       DOUBLE PRECISION,
    payback_days          BIGINT,  -- null: not paid back within the horizon
    horizon_days          BIGINT           NOT NULL,
    as_of_day             TEXT             NOT NULL,
    currency              TEXT             NOT NULL,
    gross_margin          DOUBLE PRECISION NOT NULL,
    level                 DOUBLE PRECISION NOT NULL,
    computed_at           TEXT             NOT NULL,
    PRIMARY KEY (model, dimension, key)
);

-- The purchase model against a holdout, by calibration-period frequency (the last bucket:
-- that frequency and above).
CREATE TABLE IF NOT EXISTS ltv_calibration (
    frequency            BIGINT           NOT NULL,
    customers            BIGINT           NOT NULL,
    predicted_purchases  DOUBLE PRECISION NOT NULL,
    actual_purchases     DOUBLE PRECISION NOT NULL,
    calibration_end      TEXT             NOT NULL,
    holdout_end          TEXT             NOT NULL,
    computed_at          TEXT             NOT NULL,
    PRIMARY KEY (frequency)
);

-- Incrementality (seedance incrementality, docs/incrementality.md): what each lift test
-- measured, each channel's calibration factor per model, ROI calibrated beside uncalibrated.
CREATE TABLE IF NOT EXISTS lift_tests (
    test_id         TEXT             NOT NULL,  -- the holdout's flag, or study:<channel>:...
    metric          TEXT             NOT NULL,  -- conversions | revenue
    channel         TEXT             NOT NULL,
    source          TEXT             NOT NULL,  -- holdout, or where a study came from
    start_day       TEXT             NOT NULL,
    end_day         TEXT             NOT NULL,
    exposed_users   BIGINT,                     -- null for a study
    held_out_users  BIGINT,
    incremental     DOUBLE PRECISION NOT NULL,  -- caused in the exposed users
    low             DOUBLE PRECISION NOT NULL,
    high            DOUBLE PRECISION NOT NULL,
    level           DOUBLE PRECISION NOT NULL,
    cost_saving     DOUBLE PRECISION,           -- spend per exposed user x held out
    computed_at     TEXT             NOT NULL,
    PRIMARY KEY (test_id, metric)
);

CREATE TABLE IF NOT EXISTS calibration_factors (
    model        TEXT             NOT NULL,
    channel      TEXT             NOT NULL,
    metric       TEXT             NOT NULL,  -- conversions | revenue
    test_id      TEXT             NOT NULL,
    credited     DOUBLE PRECISION NOT NULL,  -- what the model credited in the test
    incremental  DOUBLE PRECISION NOT NULL,  -- what the test measured
    factor       DOUBLE PRECISION NOT NULL,  -- max(incremental, 0) / credited
    low          DOUBLE PRECISION NOT NULL,
    high         DOUBLE PRECISION NOT NULL,
    end_day      TEXT             NOT NULL,
    age_days     BIGINT           NOT NULL,
    PRIMARY KEY (model, channel, metric)
);

CREATE TABLE IF NOT EXISTS roi_calibrated (
    model                        TEXT             NOT NULL,
    channel                      TEXT             NOT NULL,  -- or (baseline)
    first_day                    TEXT             NOT NULL,
    last_day                     TEXT             NOT NULL,
    conversions                  DOUBLE PRECISION NOT NULL,
    calibrated_conversions       DOUBLE PRECISION NOT NULL,
    calibrated_conversions_low   DOUBLE PRECISION NOT NULL,
    calibrated_conversions_high  DOUBLE PRECISION NOT NULL,
    revenue                      DOUBLE PRECISION NOT NULL,
    calibrated_revenue           DOUBLE PRECISION NOT NULL,
    calibrated_revenue_low       DOUBLE PRECISION NOT NULL,
    calibrated_revenue_high      DOUBLE PRECISION NOT NULL,
    cost                         DOUBLE PRECISION NOT NULL,  -- ad spend + compute
    ad_spend                     DOUBLE PRECISION NOT NULL,
    roi                          DOUBLE PRECISION,
    calibrated_roi               DOUBLE PRECISION,
    calibrated_roi_low           DOUBLE PRECISION,
    calibrated_roi_high          DOUBLE PRECISION,
    roas                         DOUBLE PRECISION,  -- revenue / ad spend
    calibrated_roas              DOUBLE PRECISION,
    test_id                      TEXT             NOT NULL,  -- '' when untested
    age_days                     BIGINT,
    currency                     TEXT             NOT NULL,
    PRIMARY KEY (model, channel)
);
