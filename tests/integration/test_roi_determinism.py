"""The ROI job's rows are a function of its input alone: the same credits, conversions, GPU
costs and (restated) spend, spread over 1 or 4 partitions in different orders -- costs
before the conversions that claim them, a day's credits after later days', with a CPU hog
beside the job -- give the same final rows, and those are the backfill's rows
(pipelines/backfill/roi.py) for the same input, row for row; the totals tie out."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pipelines.flink.roi.job import run_roi_job
from pipelines.kafka.io import producer
from tests.roi_inputs import (
    GPUS,
    MODELS,
    Inputs,
    conservation_problems,
    cpu_hog,
    final_rows,
    input_values,
    same_rows,
    spend_values,
)
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel

# the allocation model of the segment test: orders weigh by their customer's value with it
ALLOCATION_MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4),
                            GammaGamma(p=6.0, q=4.0, v=15.0), period_days=7.0,
                            customers=100.0, fitted_through_day=400.0)


def publish(kafka: str, topic: str, values: list[tuple[bytes | None, bytes]], partitions: int,
            rng: random.Random | None) -> None:
    """In order to partition 0, or spread over the partitions: by key where there is one,
    at random where there is none (as a producer without keys does)."""
    out = producer(kafka)
    for key, value in values:
        if rng is None:
            out.send(topic, value, partition=0)
        elif key is not None:
            out.send(topic, value, key=key)
        else:
            out.send(topic, value, partition=rng.randrange(partitions))
    out.flush()
    out.close()


def run_shape(kafka, flink, job_config, topic, inputs: Inputs, partitions: int,
              seed: int | None, costs_first: bool, compute_cost: str,
              parallelism: int = 1, **roi: Any) -> dict:
    rng = random.Random(seed) if seed is not None else None
    config = job_config.replace(
        "topics", credits=topic("credits", partitions), conversions=topic("conv", partitions),
        ad_spend=topic("spend", partitions), roi=topic("roi", partitions))
    config = config.replace("gpu", costs_topic=topic("gpu-costs", partitions))
    config = config.replace("attribution", models=MODELS)
    # hostile timing: inputs declared idle after 0.1 s, no out-of-orderness allowed, a day's
    # state retired a day after it ends, a one-day link window
    config = config.replace("event_time", idleness_s=0.1, max_out_of_orderness_s=0.0,
                            watermark_interval_s=0.05)
    config = config.replace("roi", retention_days=1.0, link_window_days=1.0,
                            compute_cost=compute_cost, **roi)
    config = config.replace("flink", parallelism=parallelism)
    for name, values in input_values(config, inputs, rng, costs_first):
        publish(kafka, name, values, partitions, rng)
    publish(kafka, config.topics.ad_spend, [(None, v) for v in spend_values(inputs)], 1, None)
    run_roi_job(config, kafka, env=flink.environment(config, "seedance-roi"))
    return final_rows(kafka, config.topics.roi), config


@pytest.mark.parametrize("partitions,seed,costs_first,hog,compute_cost,parallelism", [
    (1, None, False, False, "fully_loaded", 1),
    (4, 1, True, True, "fully_loaded", 1),
    (4, 2, False, False, "direct", 1),
    (4, 3, True, True, "fully_loaded", 2),
])
def test_roi_rows_equal_the_backfill_whatever_the_partitioning_and_order(
        kafka, flink, job_config, topic, partitions, seed, costs_first, hog, compute_cost,
        parallelism):
    inputs = Inputs(seed=5)
    with cpu_hog() if hog else _nothing():
        got, config = run_shape(kafka, flink, job_config, topic, inputs, partitions, seed,
                                costs_first, compute_cost, parallelism)
    expected = inputs.expected(config)
    assert len(expected) > 300
    assert same_rows(got, expected) == []
    assert conservation_problems(inputs, got, compute_cost) == []
    if compute_cost == "fully_loaded":  # the GPU that served nothing keeps its idle cost
        assert any(key[0] == "unallocated" and key[4] == GPUS[2] for key in got)


def test_costs_shared_by_ltv_segment_equal_the_backfill(kafka, flink, job_config, topic,
                                                        tmp_path):
    """roi.allocation_weights: ltv_segment, repeat buyers whose orders arrive in any order
    over 4 partitions (an earlier order after a later one changes the later one's
    segment), at parallelism 2 beside a CPU hog: the rows are the backfill's, and they
    differ from those of the lifecycle weights."""
    inputs = Inputs(seed=7, users=50)
    model = inputs.allocation_model(tmp_path / "allocation-model.json", ALLOCATION_MODEL)
    with cpu_hog():
        got, config = run_shape(kafka, flink, job_config, topic, inputs, 4, 6, False,
                                "fully_loaded", 2, allocation_weights="ltv_segment",
                                ltv_model=str(model))
    expected = inputs.expected(config)
    assert same_rows(got, expected) == []
    assert conservation_problems(inputs, got, "fully_loaded") == []
    by_stage = inputs.expected(config.replace("roi", allocation_weights="lifecycle_stage"))
    assert same_rows(by_stage, expected), "the segments must change the allocation"


@contextmanager
def _nothing() -> Iterator[None]:
    yield
