"""The one topic reader: Kafka topics read from a chosen start to the end they had when the
read began (or followed), in batches, with the offsets to resume from.

Every consumer of the project that reads a topic to its end -- `read_all`, the warehouse
loader, the raw archive, reconciliation's billing topic, the control loop's inputs -- is a
caller of `TopicReader`; none has a read loop of its own.

Start (`start`: one for every topic, or a mapping topic -> start, BEGINNING where absent):

- `BEGINNING`: the first offset each partition still holds;
- `Offsets({partition: offset}, otherwise)`: explicit next offsets (those a caller stored
  with its results); a partition without one starts at `otherwise` (BEGINNING);
- `Committed(group, otherwise)`: the consumer group's committed offsets (asked, never
  joined: nothing is committed to Kafka); a partition without a commit starts at
  `otherwise`;
- `AtTime(ms)`: the first offset whose timestamp is at or after `ms`; a partition with none
  starts at its end as it is when the reader is made (resolved then, not at the first poll,
  which would skip what is published between the two).

End: a bounded read (`follow=False`) stops at the end offsets the topics had when it began
(with read_committed, their last stable offsets). A record at or past them is not delivered
and its partition is left before it, so the next read delivers it. A followed read never
stops.

The stop rule, the only one: a bounded read gives up -- raises `ReadStalled`, a
TimeoutError -- only after `idle_timeout_s` seconds without progress while a partition is
still behind its end. Progress is any partition's position moving forward (records
delivered, or aborted records and transaction markers passed over); the time a caller
spends with a batch does not count. A topic still being read is read to its end however
long that takes; a broker that stops answering, or a transaction left open, fails the read.
A followed read has no end to be behind and never gives up.

read_committed unless `read_committed=False`; `client`: kafka-python settings (security:
pipelines.kafka.security.for_python), passed to the consumer as they are. No consumer group
is joined and nothing is committed: the caller keeps the resume offsets (`offsets()`,
`Batch.next_offsets`) where it keeps what it made of the records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kafka import KafkaConsumer, TopicPartition


@dataclass(frozen=True)
class Beginning:
    """Each partition's first offset."""


BEGINNING = Beginning()


@dataclass(frozen=True)
class AtTime:
    """The first offset at or after `ms` (a Kafka record timestamp); else the end as of now."""
    ms: int


@dataclass(frozen=True)
class Offsets:
    """Explicit next offsets by partition; the other partitions start at `otherwise`."""
    offsets: Mapping[int, int]
    otherwise: Beginning | AtTime = BEGINNING


@dataclass(frozen=True)
class Committed:
    """A consumer group's committed offsets; partitions without one start at `otherwise`."""
    group: str
    otherwise: Beginning | AtTime = BEGINNING


Start = Beginning | AtTime | Offsets | Committed


class ReadStalled(TimeoutError):
    """A bounded read made no progress for its idle timeout while still behind its end."""


@dataclass
class Batch:
    """The records of one poll, by partition (each in offset order), and for each of those
    partitions the offset to resume from after them."""
    by_partition: dict[TopicPartition, list[Any]] = field(default_factory=dict)
    next_offsets: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def records(self) -> list[Any]:
        return [record for records in self.by_partition.values() for record in records]

    def __len__(self) -> int:
        return sum(len(records) for records in self.by_partition.values())


def clip(records: Sequence[Any], end: int) -> tuple[list[Any], int | None]:
    """A partition's polled records (in offset order) before `end`, and the offset of the
    first one left out (None when none is)."""
    kept = next((i for i, record in enumerate(records) if record.offset >= end), len(records))
    return list(records[:kept]), (records[kept].offset if kept < len(records) else None)


def behind(positions: Mapping[TopicPartition, int],
           end: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The partitions short of their end, with how many offsets short."""
    return {tp: end[tp] - at for tp, at in positions.items() if at < end[tp]}


def moved(before: Mapping[TopicPartition, int], after: Mapping[TopicPartition, int]) -> bool:
    """Progress: a partition's position moved forward."""
    return any(after[tp] > at for tp, at in before.items())


class Stall:
    """The stop rule's clock: stalled once more than `timeout_s` passed since the last
    progress (or since the read began)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float]) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self.since = clock()

    def progressed(self) -> None:
        self.since = self.clock()

    def stalled(self) -> bool:
        return self.clock() - self.since > self.timeout_s


class TopicReader:
    """One consumer (no group) over `topics`, assigned every partition and positioned at
    `start`; `batches`, `records` and `read` read them (see the module for the stop rule).
    The reader can read again and again (the control loop polls one reader); close it, or
    use it as a context manager. `missing`: the topics that do not exist (not read)."""

    def __init__(self, bootstrap: str, topics: str | Sequence[str],
                 start: Start | Mapping[str, Start] = BEGINNING, *,
                 read_committed: bool = True, idle_timeout_s: float = 30.0,
                 max_records: int = 5000, poll_ms: int = 500,
                 client: Mapping[str, Any] | None = None, what: str = "reading") -> None:
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        starts = {topic: (start.get(topic, BEGINNING) if isinstance(start, Mapping)
                          else start) for topic in self.topics}
        groups = {s.group for s in starts.values() if isinstance(s, Committed)}
        if len(groups) > 1:
            raise ValueError(f"one reader starts from one group's offsets, not {groups}")
        self.idle_timeout_s = idle_timeout_s
        self.max_records = max_records
        self.poll_ms = poll_ms
        self.what = what
        self.clock: Callable[[], float] = time.monotonic
        self.consumer = KafkaConsumer(**{
            **(client or {}), "bootstrap_servers": bootstrap, "enable_auto_commit": False,
            "group_id": next(iter(groups), None),
            "isolation_level": "read_committed" if read_committed else "read_uncommitted"})
        try:
            self.partitions: list[TopicPartition] = []
            self.missing: list[str] = []
            for topic in self.topics:
                found = sorted(self.consumer.partitions_for_topic(topic) or ())
                if not found:
                    self.missing.append(topic)
                self.partitions += [TopicPartition(topic, p) for p in found]
            self.consumer.assign(self.partitions)
            for topic, topic_start in starts.items():
                self._seek(topic_start, [tp for tp in self.partitions if tp.topic == topic])
        except BaseException:
            self.consumer.close()
            raise

    def _seek(self, start: Start, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        if isinstance(start, Beginning):
            self.consumer.seek_to_beginning(*partitions)
        elif isinstance(start, AtTime):
            found = self.consumer.offsets_for_times({tp: start.ms for tp in partitions})
            ends = self.consumer.end_offsets(partitions)
            for tp in partitions:
                at = found.get(tp)
                self.consumer.seek(tp, ends[tp] if at is None else at.offset)
        else:
            given = ({tp: start.offsets.get(tp.partition) for tp in partitions}
                     if isinstance(start, Offsets)
                     else {tp: self.consumer.committed(tp) for tp in partitions})
            for tp, offset in given.items():
                if offset is not None and offset >= 0:
                    self.consumer.seek(tp, offset)
            self._seek(start.otherwise, [tp for tp, offset in given.items()
                                         if offset is None or offset < 0])

    def offsets(self) -> dict[TopicPartition, int]:
        """The offset each partition resumes from: the next one to read."""
        return {tp: self.consumer.position(tp) for tp in self.partitions}

    def batches(self, follow: bool = False, empty: bool = False) -> Iterator[Batch]:
        """One batch per poll that delivered records (with `empty`, per poll: a follower's
        clock tick), up to the end offsets of now (or forever with `follow`)."""
        if not self.partitions:
            return
        consumer = self.consumer
        end = None if follow else consumer.end_offsets(self.partitions)
        stall = Stall(self.idle_timeout_s, self.clock)
        positions = self.offsets()
        paused: list[TopicPartition] = []
        try:
            while True:
                if end is not None:
                    short = behind(positions, end)
                    done = [tp for tp in self.partitions if tp not in short and tp not in paused]
                    if done:  # fetch nothing past the end while other partitions catch up
                        consumer.pause(*done)
                        paused += done
                    if not short:
                        return
                    if stall.stalled():
                        raise ReadStalled(
                            f"{self.what} {', '.join(self.topics)} stalled before reaching "
                            f"its end: no progress for {self.idle_timeout_s:g} s, "
                            f"{sum(short.values())} offsets short")
                polled = consumer.poll(timeout_ms=self.poll_ms, max_records=self.max_records)
                batch = self._batch(polled, end)
                before, positions = positions, self.offsets()
                if len(batch) or empty:
                    yield batch
                if moved(before, positions):  # after the caller's work: it is no stall
                    stall.progressed()
        finally:
            if paused:
                consumer.resume(*paused)

    def _batch(self, polled: Mapping[TopicPartition, Sequence[Any]],
               end: Mapping[TopicPartition, int] | None) -> Batch:
        batch = Batch()
        for tp, records in polled.items():
            kept, cut = (list(records), None) if end is None else clip(records, end[tp])
            if cut is not None:
                self.consumer.seek(tp, cut)  # left for the next read
            if kept:
                batch.by_partition[tp] = kept
                batch.next_offsets[tp] = cut if cut is not None else self.consumer.position(tp)
        return batch

    def records(self, follow: bool = False) -> Iterator[Any]:
        """The records one by one (kafka-python ConsumerRecords), batch after batch."""
        # closing: a read stopped early (or failing) resumes its paused partitions at once
        with closing(self.batches(follow)) as batches:
            for batch in batches:
                yield from batch.records

    def read(self, on_batch: Callable[[Batch], None],
             follow: bool = False) -> dict[TopicPartition, int]:
        """Every batch through `on_batch`; returns the offsets to resume from."""
        with closing(self.batches(follow)) as batches:
            for batch in batches:
                on_batch(batch)
        return self.offsets()

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
