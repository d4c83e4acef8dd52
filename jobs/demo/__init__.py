"""`seedance demo`: the whole path on the embedded default, start to finish (run.py), with
the control loop closed on the sample's own telemetry (loop.py); its command (command.py)
and its steps through the registry (steps.py), which import nothing heavy. What it prints
of the warehouse is `seedance report`'s (jobs/commands/report.py); the sample it publishes,
pipelines/sources/publish.py."""

from jobs.demo.command import add_demo
from jobs.demo.steps import DEMO_STEPS, demo_job_name

__all__ = ["DEMO_STEPS", "add_demo", "demo_job_name"]
