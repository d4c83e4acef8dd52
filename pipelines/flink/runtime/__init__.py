"""What every job runs on: the Kafka sources and sinks and the environment
(kafka.py), the local cluster (cluster.py), a standalone cluster (standalone.py) and the
offsets a drained job leaves (final_offsets.py)."""
