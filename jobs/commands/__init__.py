"""The `seedance` commands, grouped by concern; each module registers its subcommands on the
parser that `jobs.cli` assembles (`add_<command>(sub)`) and implements them (`cmd_<command>`).

- stack: the local Kafka broker
- inputs: what is published to Kafka: sample telemetry, GPU samples, ad spend
- stream: the streaming jobs on Flink, loading their results and the report
- report: what `seedance report` and the demo print from the warehouse
- attribute: batch attribution of a file
- cluster: a standalone Flink cluster and jobs submitted to it

The backfill, archive, reconcile, dashboard and demo commands live with their jobs
(jobs/backfill.py, jobs/reconcile.py, jobs/dashboard.py, jobs/demo/command.py): no command
here imports the demo.
"""
