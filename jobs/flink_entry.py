"""Entry point for a real Flink cluster:

    flink run --python jobs/flink_entry.py \\
        [--streaming-job attribution|gpu-cost|roi|experiments] \\
        [--config jobs/config/streaming.yaml] \\
        [--bootstrap broker:9092]

The job's jars (the Kafka connector and the project's JVM classes, .cache/jars/flink after
`make setup`) are shipped with the job from the machine that submits it; the TaskManagers
need Python with this project installed. The job settings come from the YAML
(checkpoint_dir should name storage every TaskManager reaches: s3://, hdfs://, or a shared
folder). `seedance cluster up` starts such a cluster on loopback.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment

from pipelines.flink.jobs import DEFAULT_JOB, STREAMING_JOBS
from pipelines.flink.runtime.kafka import flink_configuration
from pipelines.kafka.address import KafkaAddressError, resolve_bootstrap
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.settings.paths import flink_connector_jars

JOBS = STREAMING_JOBS  # by name (pipelines/flink/jobs.py)


def build_parser() -> argparse.ArgumentParser:
    """The arguments that follow `--python jobs/flink_entry.py` on a `flink run`."""
    parser = argparse.ArgumentParser(description=__doc__)
    # not `--job`: the `flink` client takes an abbreviation of its own options, so a
    # `--job` after `--python FILE` is read as `--jobmanager` and never reaches this script
    parser.add_argument("--streaming-job", dest="job", choices=sorted(JOBS),
                        default=DEFAULT_JOB)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--bootstrap", default="")
    return parser


def cluster_configuration(config: StreamingJobConfig, job_name: str) -> Configuration:
    """The job's settings for a `flink run` on a cluster: the state backend only when the
    job config names one (`flink.state_backend`), else the cluster's own (the job's
    configuration is merged over the cluster's, so a value set here would override the
    deployment's choice, e.g. RocksDB with incremental checkpoints in deploy/k8s)."""
    return flink_configuration(config, local=False, job_name=job_name)


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    config = load_config(args.config)
    try:
        bootstrap = resolve_bootstrap(args.bootstrap, config)
    except KafkaAddressError as error:
        parser.error(str(error))
    job = JOBS[args.job]
    build = job.builder()  # the job's module, imported before the environment exists
    env = StreamExecutionEnvironment.get_execution_environment(
        cluster_configuration(config, job.flink_name))
    env.set_parallelism(config.flink.parallelism)
    env.add_jars(*[jar.as_uri() for jar in flink_connector_jars()])
    build(env, config, bootstrap)
    env.execute(job.flink_name)


if __name__ == "__main__":
    main()
