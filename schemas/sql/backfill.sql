-- Progress of Spark backfills (jobs/backfill.py). Portable SQL: SQLite and PostgreSQL.
-- A day's row is written in the same transaction that replaces the day's rows in
-- attribution_credits, roi_daily and roi_unallocated: a day listed here is complete, and a
-- run started again with the same run_id skips it (resume after a failure).
CREATE TABLE IF NOT EXISTS backfill_runs (
    run_id            TEXT    NOT NULL,  -- default '<from>..<to>'; Airflow passes its run id
    day               TEXT    NOT NULL,  -- YYYY-MM-DD (UTC), the partition replaced
    source            TEXT    NOT NULL,  -- archive | kafka
    engine            TEXT    NOT NULL,  -- spark | pandas
    credits           BIGINT  NOT NULL,  -- rows written to attribution_credits
    roi_rows          BIGINT  NOT NULL,  -- rows written to roi_daily
    unallocated_rows  BIGINT  NOT NULL,  -- rows written to roi_unallocated
    finished_at       TEXT    NOT NULL,  -- ISO 8601 UTC, when the day's transaction ran
    PRIMARY KEY (run_id, day)
);
