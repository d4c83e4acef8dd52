"""Pure, engine-free logic shared by the Flink job, the Spark backfill and the batch CLI."""
