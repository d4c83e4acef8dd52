"""The topic reader's logic (pipelines/kafka/reader.py) over an in-memory stand-in for
kafka-python's consumer: start positions, the end seen at the start, batches and resume
offsets, pausing at the end, and the one stop rule (no progress for the idle timeout while
behind the end)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import pytest
from kafka import TopicPartition

from pipelines.kafka import reader as reader_module
from pipelines.kafka.reader import (
    BEGINNING,
    AtTime,
    Committed,
    Offsets,
    ReadStalled,
    Stall,
    TopicReader,
    behind,
    clip,
    moved,
)

Record = namedtuple("Record", "topic partition offset timestamp key value")
Found = namedtuple("Found", "offset timestamp")


class FakeConsumer:
    """Topics as lists of records by partition; `poll` returns up to `max_records` from the
    unpaused partitions in order. `stuck`: partitions whose polls return nothing.
    `markers`: offsets a poll passes over without a record (transaction markers)."""

    def __init__(self, logs: dict[TopicPartition, list[Record]], committed: Any = None,
                 **config: Any) -> None:
        self.logs = logs
        self.config = config
        self.group_commits: dict[TopicPartition, int] = committed or {}
        self.assigned: list[TopicPartition] = []
        self.at: dict[TopicPartition, int] = {}
        self.paused_set: set[TopicPartition] = set()
        self.stuck: set[TopicPartition] = set()
        self.markers: set[tuple[TopicPartition, int]] = set()
        self.polls = 0
        self.closed = False
        self.on_poll: Any = None

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        found = {tp.partition for tp in self.logs if tp.topic == topic}
        return found or None

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = list(partitions)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self.at[tp] = self.logs[tp][0].offset if self.logs[tp] else 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.at[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self.at[tp]

    def end(self, tp: TopicPartition) -> int:
        return max([r.offset + 1 for r in self.logs[tp]]
                   + [offset + 1 for part, offset in self.markers if part == tp], default=0)

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.end(tp) for tp in partitions}

    def offsets_for_times(self, times: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        out = {}
        for tp, ms in times.items():
            hit = next((r for r in self.logs[tp] if r.timestamp >= ms), None)
            out[tp] = None if hit is None else Found(hit.offset, hit.timestamp)
        return out

    def committed(self, tp: TopicPartition) -> int | None:
        return self.group_commits.get(tp)

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused_set.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused_set.difference_update(partitions)

    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Record]]:
        self.polls += 1
        if self.on_poll:
            self.on_poll(self)
        out: dict[TopicPartition, list[Record]] = {}
        left = max_records
        for tp in self.assigned:
            if tp in self.paused_set or tp in self.stuck or left == 0:
                continue
            while (tp, self.at[tp]) in self.markers:
                self.at[tp] += 1
            records = [r for r in self.logs[tp] if r.offset >= self.at[tp]][:left]
            if records:
                out[tp] = records
                left -= len(records)
                self.at[tp] = records[-1].offset + 1
                while (tp, self.at[tp]) in self.markers:
                    self.at[tp] += 1
        return out

    def close(self) -> None:
        self.closed = True


A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def log(tp: TopicPartition, n: int, first: int = 0, ts0: int = 1000) -> list[Record]:
    return [Record(tp.topic, tp.partition, o, ts0 + o, None, f"{tp.topic}{tp.partition}-{o}"
                   .encode()) for o in range(first, first + n)]


@pytest.fixture
def kafka(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`kafka["logs"]`: what the next reader's consumer sees; `kafka["made"]`: the consumers
    made, last one last."""
    box: dict[str, Any] = {"logs": {}, "made": [], "committed": {}}

    def make(**config: Any) -> FakeConsumer:
        consumer = FakeConsumer(box["logs"], box["committed"], **config)
        box["made"].append(consumer)
        return consumer

    monkeypatch.setattr(reader_module, "KafkaConsumer", make)
    return box


def values(records: list[Any]) -> list[bytes]:
    return [r.value for r in records]


# -- the pure parts ----------------------------------------------------------------------

def test_clip_keeps_the_records_before_the_end_and_names_the_first_left_out():
    records = log(A0, 5)
    assert clip(records, 3) == (records[:3], 3)
    assert clip(records, 5) == (records, None)
    assert clip(records, 0) == ([], 0)
    assert clip([], 4) == ([], None)


def test_behind_and_moved():
    assert behind({A0: 3, A1: 7}, {A0: 5, A1: 7}) == {A0: 2}
    assert moved({A0: 3, A1: 7}, {A0: 3, A1: 8})
    assert not moved({A0: 3, A1: 7}, {A0: 3, A1: 7})


def test_stall_counts_from_the_last_progress():
    now = [0.0]
    stall = Stall(30, lambda: now[0])
    now[0] = 30
    assert not stall.stalled()  # exactly the timeout: not yet
    now[0] = 30.5
    assert stall.stalled()
    stall.progressed()
    now[0] = 60
    assert not stall.stalled()


# -- starts --------------------------------------------------------------------------------

def test_a_read_from_the_beginning_stops_at_the_end_it_saw(kafka):
    kafka["logs"].update({A0: log(A0, 3), A1: log(A1, 2, first=4)})
    with TopicReader("k:9092", "a") as reader:
        assert reader.partitions == [A0, A1] and reader.missing == []
        assert values(list(reader.records())) == [b"a0-0", b"a0-1", b"a0-2", b"a1-4", b"a1-5"]
        assert reader.offsets() == {A0: 3, A1: 6}
    consumer = kafka["made"][-1]
    assert consumer.closed and consumer.paused_set == set()  # resumed for a later read
    assert consumer.config["isolation_level"] == "read_committed"
    assert consumer.config["group_id"] is None and not consumer.config["enable_auto_commit"]


def test_explicit_offsets_with_the_beginning_for_the_rest(kafka):
    kafka["logs"].update({A0: log(A0, 5), A1: log(A1, 3)})
    with TopicReader("k", "a", Offsets({0: 3})) as reader:
        assert values(list(reader.records())) == [b"a0-3", b"a0-4", b"a1-0", b"a1-1", b"a1-2"]


def test_committed_offsets_of_a_group(kafka):
    kafka["logs"].update({A0: log(A0, 5), A1: log(A1, 3)})
    kafka["committed"].update({A0: 4})
    with TopicReader("k", "a", Committed("loader")) as reader:
        assert values(list(reader.records())) == [b"a0-4", b"a1-0", b"a1-1", b"a1-2"]
    assert kafka["made"][-1].config["group_id"] == "loader"
    with pytest.raises(ValueError, match="one group"):
        TopicReader("k", ["a", "b"], {"a": Committed("x"), "b": Committed("y")})


def test_offsets_for_a_time_per_topic_and_the_end_where_none_is_that_late(kafka):
    kafka["logs"].update({A0: log(A0, 5, ts0=1000), B0: log(B0, 3, ts0=1000)})
    with TopicReader("k", ["a", "b"], {"a": AtTime(1003), "b": AtTime(9999)}) as reader:
        assert reader.offsets() == {A0: 3, B0: 3}  # b: its end as of now
        kafka["logs"][B0].append(Record("b", 0, 3, 20_000, None, b"later"))
        assert values(list(reader.records())) == [b"a0-3", b"a0-4", b"later"]


def test_a_missing_topic_is_named_and_not_read(kafka):
    kafka["logs"].update({A0: log(A0, 1)})
    with TopicReader("k", ["a", "b"], BEGINNING, read_committed=False,
                     client={"security_protocol": "SASL_SSL"}) as reader:
        assert reader.missing == ["b"] and reader.partitions == [A0]
    config = kafka["made"][-1].config
    assert config["security_protocol"] == "SASL_SSL"
    assert config["isolation_level"] == "read_uncommitted"
    with TopicReader("k", "b") as reader:
        assert list(reader.records()) == [] and reader.offsets() == {}
    assert kafka["made"][-1].polls == 0


# -- ends, batches, resume offsets -------------------------------------------------------

def test_records_past_the_end_are_left_for_the_next_read(kafka):
    kafka["logs"].update({A0: log(A0, 2), A1: log(A1, 2)})

    def publish_more(consumer: FakeConsumer) -> None:
        if consumer.polls == 1:  # published after the read began
            consumer.logs[A0].extend(log(A0, 2, first=2))

    with TopicReader("k", "a") as reader:
        kafka["made"][-1].on_poll = publish_more
        batches = list(reader.batches())
        assert [values(b.records) for b in batches] == [[b"a0-0", b"a0-1", b"a1-0", b"a1-1"]]
        assert batches[0].next_offsets == {A0: 2, A1: 2}
        assert reader.offsets() == {A0: 2, A1: 2}
        # the next read takes the end of now
        assert values(list(reader.records())) == [b"a0-2", b"a0-3"]


def test_a_poll_past_the_end_is_cut_and_the_partition_sought_back(kafka):
    kafka["logs"].update({A0: log(A0, 2)})
    with TopicReader("k", "a", max_records=10) as reader:
        consumer = kafka["made"][-1]
        consumer.on_poll = lambda c: c.logs[A0].extend(log(A0, 3, first=2)) if c.polls == 1 \
            else None
        (batch,) = reader.batches()
        assert values(batch.records) == [b"a0-0", b"a0-1"] and batch.next_offsets == {A0: 2}
        assert consumer.at[A0] == 2


def test_a_partition_at_its_end_is_paused_while_another_catches_up(kafka):
    kafka["logs"].update({A0: log(A0, 1), A1: log(A1, 6)})
    seen: list[set[TopicPartition]] = []
    with TopicReader("k", "a", max_records=2) as reader:
        consumer = kafka["made"][-1]
        consumer.on_poll = lambda c: seen.append(set(c.paused_set))
        sizes = [len(batch) for batch in reader.batches()]
    assert sizes == [2, 2, 2, 1] and seen[1:] == [{A0}] * 3
    assert consumer.paused_set == set()


def test_read_hands_batches_to_the_callback_and_returns_the_resume_offsets(kafka):
    kafka["logs"].update({A0: log(A0, 5)})
    got: list[list[bytes]] = []
    with TopicReader("k", "a", Offsets({0: 1}), max_records=3) as reader:
        offsets = reader.read(lambda batch: got.append(values(batch.records)))
    assert got == [[b"a0-1", b"a0-2", b"a0-3"], [b"a0-4"]] and offsets == {A0: 5}


def test_transaction_markers_at_the_end_are_passed_and_count_as_progress(kafka):
    kafka["logs"].update({A0: log(A0, 2)})
    with TopicReader("k", "a") as reader:
        consumer = kafka["made"][-1]
        consumer.markers.add((A0, 2))  # the commit marker after the two records
        assert len(list(reader.records())) == 2
        assert reader.offsets() == {A0: 3}


def test_follow_yields_every_poll_when_asked_and_never_stops(kafka):
    kafka["logs"].update({A0: log(A0, 1)})
    with TopicReader("k", "a", idle_timeout_s=0) as reader:
        reader.clock = iter(range(0, 10**6, 100)).__next__  # no timeout applies to a follower
        polled = reader.batches(follow=True, empty=True)
        got = [len(next(polled)) for _ in range(4)]
        assert got == [1, 0, 0, 0]
        kafka["logs"][A0].append(Record("a", 0, 1, 0, None, b"new"))
        assert values(next(polled).records) == [b"new"]


# -- the stop rule ---------------------------------------------------------------------

def test_no_progress_for_the_idle_timeout_while_behind_raises(kafka):
    kafka["logs"].update({A0: log(A0, 2), A1: log(A1, 2)})
    now = [0.0]
    with TopicReader("k", "a", idle_timeout_s=30, what="loading") as reader:
        reader.clock = lambda: now[0]
        consumer = kafka["made"][-1]
        consumer.stuck.add(A1)

        def tick(c: FakeConsumer) -> None:
            now[0] += 10

        consumer.on_poll = tick
        with pytest.raises(ReadStalled, match=r"loading a stalled before reaching its end: "
                                               r"no progress for 30 s, 2 offsets short"):
            list(reader.records())
        assert now[0] == 50  # progress at 10 (A0's records), stalled after 40 s more
        assert isinstance(ReadStalled("x"), TimeoutError)
        assert consumer.paused_set == set()


def test_a_slow_read_that_keeps_progressing_is_read_to_its_end(kafka):
    kafka["logs"].update({A0: log(A0, 50)})
    now = [0.0]
    with TopicReader("k", "a", idle_timeout_s=5, max_records=1) as reader:
        reader.clock = lambda: now[0]
        kafka["made"][-1].on_poll = lambda c: now.__setitem__(0, now[0] + 4)
        assert len(list(reader.records())) == 50  # 200 s in all, 4 s a record
        assert now[0] == 200


def test_the_callers_time_with_a_batch_is_no_stall(kafka):
    kafka["logs"].update({A0: log(A0, 4)})
    now = [0.0]
    with TopicReader("k", "a", idle_timeout_s=5, max_records=2) as reader:
        reader.clock = lambda: now[0]

        def slow(batch: Any) -> None:
            now[0] += 60  # a long database write

        assert reader.read(slow) == {A0: 4}


def test_a_failing_callback_leaves_no_partition_paused(kafka):
    kafka["logs"].update({A0: log(A0, 1), A1: log(A1, 5)})
    calls = []

    def fail_second(batch: Any) -> None:
        calls.append(len(batch))
        if len(calls) == 2:
            raise RuntimeError("the disk is full")

    with TopicReader("k", "a", max_records=2) as reader:
        consumer = kafka["made"][-1]
        with pytest.raises(RuntimeError, match="disk is full"):
            reader.read(fail_second)
        assert consumer.paused_set == set() and calls == [2, 2]
        # the positions are past the failed batch: a caller resumes from what it stored
        assert reader.offsets() == {A0: 1, A1: 3}
