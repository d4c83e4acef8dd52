"""Entry point for a real Flink cluster:

    flink run --python jobs/flink_entry.py --jarfile flink-sql-connector-kafka-5.0.0-2.2.jar \\
        [--config jobs/config/streaming.yaml] [--bootstrap broker:9092]

The cluster supplies the jars and the Python workers; the job settings come from the YAML
(checkpoint_dir should name shared storage such as s3:// or hdfs:// there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pyflink.datastream import StreamExecutionEnvironment

from pipelines.config import load_config
from pipelines.flink_job import build_pipeline
from pipelines.flink_kafka import flink_configuration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    config = load_config(args.config)
    bootstrap = args.bootstrap or config.kafka.bootstrap
    if not bootstrap:
        parser.error("no Kafka address: set kafka.bootstrap, SEEDANCE_KAFKA_BOOTSTRAP "
                     "or --bootstrap")
    env = StreamExecutionEnvironment.get_execution_environment(
        flink_configuration(config, local=False))
    env.set_parallelism(config.flink.parallelism)
    build_pipeline(env, config, bootstrap)
    env.execute("seedance-attribution")


if __name__ == "__main__":
    main()
