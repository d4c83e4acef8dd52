"""The LTV job: orders tallied per customer and scored with the published LTV model
(pipelines/flink/ltv/job.py)."""
