-- Daily reconciliation against billing data (docs/reconciliation.md). Portable SQL: runs on
-- the embedded SQLite default and on PostgreSQL; applied by pipelines/reconcile/store.py.
-- Days are YYYY-MM-DD text, instants ISO 8601 UTC text (text order is time order).

-- Billing rows as the ad platforms report them, one per campaign-day. A restated report
-- replaces the row only if it was taken later (reported_at): the latest restatement wins,
-- whatever order the files or messages arrive in.
CREATE TABLE IF NOT EXISTS billing_ad_rows (
    platform            TEXT             NOT NULL,  -- google_ads, meta, or a generic file's
    account             TEXT             NOT NULL,
    campaign            TEXT             NOT NULL,
    day                 TEXT             NOT NULL,  -- in the account's time zone
    currency            TEXT             NOT NULL,
    spend               DOUBLE PRECISION,           -- NULL: the report does not carry it
    conversions         DOUBLE PRECISION,
    revenue             DOUBLE PRECISION,
    time_zone           TEXT             NOT NULL,  -- the account's zone if the report says
    attribution_window  TEXT             NOT NULL,
    date_basis          TEXT             NOT NULL,  -- interaction | conversion
    source              TEXT             NOT NULL,  -- file:line or topic[partition]@offset
    reported_at         TEXT             NOT NULL,
    PRIMARY KEY (platform, account, campaign, day)
);

-- FOCUS cloud bills: EffectiveCost per billing period, ResourceId, charge day (UTC) and
-- charge category, per file or message it came in. A later export of a billing period
-- replaces every row of that period; corrections (ChargeClass=Correction) are included in
-- cost and shown apart in correction_cost.
CREATE TABLE IF NOT EXISTS billing_cloud_costs (
    billing_account       TEXT             NOT NULL,
    billing_period_start  TEXT             NOT NULL,
    resource_id           TEXT             NOT NULL,
    day                   TEXT             NOT NULL,
    charge_category       TEXT             NOT NULL,
    source                TEXT             NOT NULL,
    currency              TEXT             NOT NULL,
    cost                  DOUBLE PRECISION NOT NULL,
    correction_cost       DOUBLE PRECISION NOT NULL,
    lines                 INTEGER          NOT NULL,
    provider              TEXT             NOT NULL,
    reported_at           TEXT             NOT NULL,
    PRIMARY KEY (billing_account, billing_period_start, resource_id, day, charge_category,
                 source)
);

CREATE INDEX IF NOT EXISTS billing_cloud_costs_by_day ON billing_cloud_costs (day);

-- One row per key, day and metric: our number against the billing source's. A rerun of a
-- day replaces all of that day's rows in one transaction.
--   scope campaign: (platform, account, entity = campaign id), metrics spend, conversions,
--                   revenue; scope gpu: (entity = FOCUS ResourceId), metric compute_cost;
--   scope total:    platform = account = entity = '*', the day's total of a metric.
CREATE TABLE IF NOT EXISTS reconciliation_daily (
    scope          TEXT             NOT NULL,
    platform       TEXT             NOT NULL,
    account        TEXT             NOT NULL,
    entity         TEXT             NOT NULL,
    day            TEXT             NOT NULL,
    metric         TEXT             NOT NULL,  -- spend | conversions | revenue | compute_cost
    currency       TEXT             NOT NULL,  -- the billing source's; '' for conversions
    ours           DOUBLE PRECISION,           -- NULL: no row on our side
    theirs         DOUBLE PRECISION,           -- NULL: no row in the billing source
    difference     DOUBLE PRECISION NOT NULL,  -- ours - theirs, NULL counted as 0
    drift          DOUBLE PRECISION,           -- (ours - theirs) / |theirs|; NULL if theirs 0
    threshold      DOUBLE PRECISION NOT NULL,
    min_volume     DOUBLE PRECISION NOT NULL,
    status         TEXT             NOT NULL,  -- ok | breach | below_min_volume | no_report
    contributors   TEXT             NOT NULL,  -- JSON list of {name, ours, theirs}
    billing_source TEXT             NOT NULL,  -- where their number came from
    reported_at    TEXT             NOT NULL,  -- the restatement it came from
    PRIMARY KEY (scope, platform, account, entity, day, metric)
);

CREATE INDEX IF NOT EXISTS reconciliation_daily_by_status
    ON reconciliation_daily (day, status);

-- Alert events: a breach opens one alert per key and day (seq 1; seq 2 if it breaches
-- again after a resolve); a later run back under the threshold resolves it. Each event is
-- delivered to every sink at most once: the *_status columns say where it went.
CREATE TABLE IF NOT EXISTS alerts (
    alert_id         TEXT             NOT NULL PRIMARY KEY,  -- stable: key, day, seq, kind
    kind             TEXT             NOT NULL,  -- open | resolve
    scope            TEXT             NOT NULL,
    platform         TEXT             NOT NULL,
    account          TEXT             NOT NULL,
    entity           TEXT             NOT NULL,
    day              TEXT             NOT NULL,
    metric           TEXT             NOT NULL,
    seq              INTEGER          NOT NULL,
    currency         TEXT             NOT NULL,
    ours             DOUBLE PRECISION,
    theirs           DOUBLE PRECISION,
    drift            DOUBLE PRECISION,           -- NULL: theirs is 0 (infinite drift)
    threshold        DOUBLE PRECISION NOT NULL,
    min_volume       DOUBLE PRECISION NOT NULL,
    contributors     TEXT             NOT NULL,  -- JSON, as in reconciliation_daily
    run_id           TEXT             NOT NULL,
    raised_at        TEXT             NOT NULL,
    log_status       TEXT             NOT NULL,  -- pending | sent | disabled
    kafka_status     TEXT             NOT NULL,  -- pending | sent | failed | disabled
    webhook_status   TEXT             NOT NULL,  -- pending | sent | failed | rejected | disabled
                                                 -- (failed: retried by the next run;
                                                 -- rejected: a 4xx, not retried)
    webhook_attempts INTEGER          NOT NULL,
    last_error       TEXT             NOT NULL,
    UNIQUE (scope, platform, account, entity, day, metric, seq, kind)
);

CREATE INDEX IF NOT EXISTS alerts_by_day ON alerts (day, metric);

-- One row per run of `seedance reconcile`, for the audit trail.
CREATE TABLE IF NOT EXISTS reconciliation_runs (
    run_id        TEXT    NOT NULL PRIMARY KEY,
    started_at    TEXT    NOT NULL,
    finished_at   TEXT    NOT NULL,  -- '' while running
    day_from      TEXT    NOT NULL,
    day_to        TEXT    NOT NULL,
    runner        TEXT    NOT NULL,
    status        TEXT    NOT NULL,  -- running | done | failed
    rows_written  INTEGER NOT NULL,
    breaches      INTEGER NOT NULL,
    opened        INTEGER NOT NULL,
    resolved      INTEGER NOT NULL,
    detail        TEXT    NOT NULL
);
