"""`seedance demo`: the whole path on the embedded default, start to finish (run.py), with
the control loop closed on the sample's own telemetry (loop.py). What it prints of the
warehouse is `seedance report`'s (jobs/commands/report.py); the sample it publishes,
pipelines/sources/publish.py."""

from jobs.demo.run import DEMO_STEPS, demo_job_name, run_demo

__all__ = ["DEMO_STEPS", "demo_job_name", "run_demo"]
