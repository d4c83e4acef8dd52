"""What the demo runs of the registry (pipelines/flink/jobs.py): a line per streaming job,
and the Flink job name it runs each as. Light: the CLI imports it when it starts."""

from __future__ import annotations

from pipelines.flink.jobs import ATTRIBUTION, EXPERIMENTS, GPU_COST, LTV, ROI, StreamingJob

# What the demo says it runs each streaming job for (after "Running the Flink <title> job").
DEMO_STEPS = {ATTRIBUTION.name: " until the sample is consumed",
              GPU_COST.name: " over the GPU samples and GPU-backed spans",
              ROI.name: ": spend and GPU cost allocated to the conversions",
              EXPERIMENTS.name: ": each user's first variant, their orders",
              LTV.name: ": each customer scored with the model fitted on the orders"}


def demo_job_name(job: StreamingJob) -> str:
    """The Flink job name of `job` in the demo (its checkpoints apart from a real run's)."""
    return "seedance-demo" if job is ATTRIBUTION else f"seedance-demo-{job.name}"
