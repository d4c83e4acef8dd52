"""The attribution job: OTLP spans decoded into event batches per user bucket, journeys
assembled as the watermark passes, credits per model, the data-driven fit and the run's
accounting (pipelines/flink/attribution/job.py wires them)."""
