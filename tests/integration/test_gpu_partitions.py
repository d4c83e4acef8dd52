"""The GPU cost job gives the same costs whether its two topics have one partition or four,
read at parallelism 1 or 2: event time comes from the records themselves, per partition, in
the sources (a sample's time, a span's start), so a partition read ahead of another never
makes the other's records late."""

from __future__ import annotations

from tests.gpu_telemetry import run_shape


def test_gpu_costs_do_not_depend_on_partitions_or_parallelism(kafka, flink, job_config, topic):
    one, late_one = run_shape(kafka, flink, job_config, topic, 1, 1)
    four, late_four = run_shape(kafka, flink, job_config, topic, 4, 2)
    assert len(one) > 200 and late_one == []
    assert late_four == []
    assert four == one
