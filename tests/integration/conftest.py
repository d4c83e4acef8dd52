"""One real Kafka broker and one Flink MiniCluster per test session; fresh topics per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipelines.config import StreamingJobConfig, load_config
from pipelines.flink_cluster import LocalFlinkCluster
from pipelines.kafka_io import ensure_topics
from pipelines.local_stack import LocalKafka

_topic_ids = itertools.count()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a KRaft broker started for this session."""
    broker = LocalKafka(tmp_path_factory.mktemp("kafka"))
    info = broker.up()
    try:
        yield info.bootstrap
    finally:
        broker.down()


@pytest.fixture(scope="session")
def flink() -> Iterator[LocalFlinkCluster]:
    cluster = LocalFlinkCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def topic(kafka: str, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Factory of fresh topic names, unique per test (and created on the broker)."""

    def make(purpose: str) -> str:
        name = f"{request.node.name[:40]}-{purpose}-{next(_topic_ids)}".replace("[", "_") \
            .replace("]", "_")
        ensure_topics(kafka, [name])
        return name

    return make


@pytest.fixture
def job_config(topic: Callable[[str], str], tmp_path: Path) -> StreamingJobConfig:
    """A bounded job over fresh topics, checkpointing often, from the shipped defaults."""
    config = load_config()
    config = config.replace("topics", spans=topic("spans"), credits=topic("credits"),
                            dead_letter=topic("dlq"), late=topic("late"))
    config = config.replace("input", bounded=True, starting_offsets="earliest",
                            group_id=f"test-{next(_topic_ids)}")
    return config.replace("flink", checkpoint_interval_s=1.0,
                          checkpoint_dir=str(tmp_path / "checkpoints"))
