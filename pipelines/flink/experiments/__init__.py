"""The experiments job: feature-flag exposures joined to orders and credits per variant
(pipelines/flink/experiments/job.py)."""
