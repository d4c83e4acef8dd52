"""One real Kafka broker, one Flink MiniCluster and one PostgreSQL server per test session
(each started when a test first needs it); fresh topics and databases per test."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pipelines.flink.runtime.cluster import LocalFlinkCluster
from pipelines.kafka.io import SAMPLE_SPANS_TOPIC, ensure_topics
from pipelines.settings.job_config import StreamingJobConfig, load_config
from pipelines.stack.local_kafka import LocalKafka
from pipelines.stack.postgres import LocalPostgres
from tests.reference import TEST_HORIZON_DAYS

_topic_ids = itertools.count()
_database_ids = itertools.count()


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


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """URL of the database `seedance` on a PostgreSQL server started for this session."""
    # Not under pytest's tmp folder: as root the server runs as the `postgres` user, which
    # cannot enter pytest's private (0700) folders; /tmp itself is open to it.
    home = Path(tempfile.mkdtemp(prefix="seedance-pg-"))
    # fsync off: a test server's data need not survive a power cut, and it is much faster
    server = LocalPostgres(home, settings={"fsync": "off", "synchronous_commit": "off",
                                           "full_page_writes": "off"})
    try:
        yield server.up().url
    finally:
        server.down()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty warehouse per test, on each database: a SQLite file, or a new
    database on the session's PostgreSQL server (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'warehouse.db'}"
        return
    url: str = request.getfixturevalue("postgres")
    name = f"test_{next(_database_ids)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))


@pytest.fixture
def topic(kafka: str, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Factory of fresh topic names, unique per test (and created on the broker, with
    `partitions` and topic settings beyond the default ones)."""

    def make(purpose: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{request.node.name[:40]}-{purpose}-{next(_topic_ids)}".replace("[", "_") \
            .replace("]", "_")
        if purpose == "spans":  # the tests publish samples stamped with their arrival
            config = {**SAMPLE_SPANS_TOPIC, **(config or {})}
        ensure_topics(kafka, [name], partitions, config)
        return name

    return make


@pytest.fixture
def job_config(topic: Callable[[str], str], tmp_path: Path) -> StreamingJobConfig:
    """A bounded job over fresh topics, checkpointing often, from the shipped defaults."""
    config = load_config()
    config = config.replace("topics", spans=topic("spans"), credits=topic("credits"),
                            dead_letter=topic("dlq"), late=topic("late"),
                            conversions=topic("conversions"), ad_spend=topic("spend"),
                            roi_dead_letter=topic("roi-dlq"), roi=topic("roi"),
                            accounting=topic("accounting"),
                            experiment_exposures=topic("exposures"),
                            experiment_conversions=topic("experiment-conversions"))
    config = config.replace("gpu", costs_topic=topic("gpu-costs"))
    config = config.replace("input", bounded=True, starting_offsets="earliest",
                            group_id=f"test-{next(_topic_ids)}")
    config = config.replace("journey", correction_days=TEST_HORIZON_DAYS)
    return config.replace("flink", checkpoint_interval_s=1.0,
                          checkpoint_dir=str(tmp_path / "checkpoints"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark session for the test session (each start costs ~10 s)."""
    from pipelines.backfill.config import SparkConfig
    from pipelines.backfill.spark import kafka_jars, spark_session

    session = spark_session(SparkConfig(master="local[2]", driver_memory="1g",
                                        shuffle_partitions=2,
                                        conf={"spark.ui.enabled": "false"}), kafka_jars())
    yield session
    session.stop()
