"""The GPU-cost job: GPU metrics and GPU-backed spans into cost per call and idle cost
(pipelines/flink/gpu_cost/job.py)."""
