"""The raw archive: every decoded touchpoint, order and GPU call as Parquet, by event date.

`seedance archive` runs beside the streaming job and consumes the same spans topic
(read_committed, its own offsets), so the Spark backfill can recompute any day long after
Kafka's retention has dropped it. Layout under the archive root:

    <kind>/date=YYYY-MM-DD/<topic>-p<partition>-<first offset>-<last offset>.parquet
    _offsets/<topic>.json        the next offset per partition

kind is touchpoints, conversions or gpu_calls; the date is the UTC day of the event (the
span start). Touchpoints and conversions also keep `arrival_ms`, the Kafka timestamp of the
record that carried them: which events count is decided by arrival (udfs/journeys/arrival.py), so
the backfill needs it. Files written before that column existed read as NO_ARRIVAL: every
event in them counts. Exactly once: a batch's files are written first (each under a temporary
name, then renamed), its offsets after them (one atomic rename). A restart deletes the
topic's files at or past the stored offsets -- those of a batch that died before its
offsets were stored -- and reads those messages again. Starting with no stored offsets
rebuilds the topic's part of the archive from the beginning of the topic.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipelines.codec.otlp import decode_spans
from pipelines.kafka.reader import Offsets, TopicReader
from schemas.records import Conversion, GpuCall, Touchpoint
from udfs.journeys import NO_ARRIVAL
from udfs.periods import day_of

SCHEMAS = {
    "touchpoints": pa.schema([("user_id", pa.string()), ("ts_ms", pa.int64()),
                              ("channel", pa.string()), ("campaign", pa.string()),
                              ("trace_id", pa.string()), ("span_id", pa.string())]),
    "conversions": pa.schema([("user_id", pa.string()), ("ts_ms", pa.int64()),
                              ("order_id", pa.string()), ("revenue", pa.float64()),
                              ("currency", pa.string()), ("trace_id", pa.string()),
                              ("span_id", pa.string())]),
    "gpu_calls": pa.schema([("trace_id", pa.string()), ("span_id", pa.string()),
                            ("start_ms", pa.int64()), ("end_ms", pa.int64()),
                            ("user_id", pa.string()), ("gpu_uuid", pa.string()),
                            ("k8s_pod", pa.string()), ("k8s_namespace", pa.string()),
                            ("workload", pa.string())]),
}
# The kinds whose events count by arrival, and the column that keeps it (Kafka's record
# timestamp, ms); SCHEMAS are the record fields alone.
ARRIVAL = pa.field("arrival_ms", pa.int64())
ARRIVAL_KINDS = ("touchpoints", "conversions")
KIND_OF = {Touchpoint: "touchpoints", Conversion: "conversions", GpuCall: "gpu_calls"}
TIME_COLUMN = {"touchpoints": "ts_ms", "conversions": "ts_ms", "gpu_calls": "start_ms"}

_FILE = re.compile(r"^(?P<topic>.+)-p(?P<partition>\d+)-(?P<first>\d{20})-(?P<last>\d{20})"
                   r"\.parquet$")

Message = tuple[int, int, bytes | None, int]
"""(partition, offset, value, timestamp ms) of one Kafka message."""


def file_schema(kind: str) -> pa.Schema:
    """The columns of a kind's files: the record's, and its arrival where it has one."""
    schema = SCHEMAS[kind]
    return schema.append(ARRIVAL) if kind in ARRIVAL_KINDS else schema


def file_name(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic}-p{partition}-{first:020d}-{last:020d}.parquet"


@dataclass
class BatchStats:
    messages: int = 0
    records: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SCHEMAS, 0))
    dead_letters: int = 0
    files: int = 0


def tables_by_date(records: Iterable[Touchpoint | Conversion | GpuCall],
                   arrivals: Iterable[int] | None = None) -> dict[tuple[str, str], pa.Table]:
    """Records grouped by (kind, event day), as Arrow tables of the archive's file schemas;
    `arrivals`: each record's arrival (its Kafka record's timestamp), NO_ARRIVAL without."""
    rows: dict[tuple[str, str], list[tuple[object, ...]]] = {}
    arrival_of = iter(arrivals) if arrivals is not None else None
    for record in records:
        kind = KIND_OF[type(record)]
        ts = record.start_ms if isinstance(record, GpuCall) else record.ts_ms
        arrival = NO_ARRIVAL if arrival_of is None else next(arrival_of)
        extra = (arrival,) if kind in ARRIVAL_KINDS else ()
        rows.setdefault((kind, day_of(ts)), []).append((*record, *extra))
    out = {}
    for (kind, day), items in rows.items():
        schema = file_schema(kind)
        columns = list(zip(*items, strict=True))
        out[kind, day] = pa.table([pa.array(col, type=column.type)
                                   for col, column in zip(columns, schema, strict=True)],
                                  schema=schema)
    return out


def write_tables(root: Path | str, tables: dict[tuple[str, str], pa.Table],
                 stem: str) -> int:
    """Write (kind, day) tables as `<kind>/date=<day>/<stem>.parquet` (atomically each);
    returns the number of files. For loads that do not come from Kafka (imports, tests,
    benchmarks); the archiver names its files after their offsets instead."""
    for (kind, day), table in tables.items():
        folder = Path(root) / kind / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{stem}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, folder / f"{stem}.parquet")
    return len(tables)


class Archive:
    """One archive root; writes and recovers the files of one topic."""

    def __init__(self, root: Path | str, topic: str) -> None:
        self.root = Path(root)
        self.topic = topic
        self.offsets_file = self.root / "_offsets" / f"{topic}.json"

    # -- offsets ------------------------------------------------------------------------
    def committed(self) -> dict[int, int]:
        """Next offset to read per partition, as the last finished batch left it."""
        try:
            data = json.loads(self.offsets_file.read_text())
        except FileNotFoundError:
            return {}
        return {int(p): int(o) for p, o in data["next_offsets"].items()}

    def commit(self, next_offsets: dict[int, int]) -> None:
        merged = {**self.committed(), **next_offsets}
        self.offsets_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.offsets_file.with_name(f".{self.offsets_file.name}.tmp")
        tmp.write_text(json.dumps({"topic": self.topic, "next_offsets": {
            str(p): o for p, o in sorted(merged.items())}}, indent=1))
        os.replace(tmp, self.offsets_file)  # atomic: a crash leaves the old or the new

    # -- files --------------------------------------------------------------------------
    def files(self) -> list[tuple[Path, int, int]]:
        """(path, partition, first offset) of every data file of this topic."""
        out = []
        for kind in SCHEMAS:
            for path in (self.root / kind).glob("date=*/*.parquet"):
                match = _FILE.match(path.name)
                if match and match["topic"] == self.topic:
                    out.append((path, int(match["partition"]), int(match["first"])))
        return out

    def recover(self) -> dict[int, int]:
        """Delete files no stored offset covers (a batch that died before its commit) and
        return the offsets to resume from."""
        committed = self.committed()
        for path, partition, first in self.files():
            if first >= committed.get(partition, 0):
                path.unlink()
        return committed

    def write_batch(self, messages: Sequence[Message], encoding: str = "auto") -> BatchStats:
        """Decode a batch of messages and write its records, one file per kind and day.

        Offsets are not committed here: call `commit` once the files are in place."""
        stats = BatchStats(messages=len(messages))
        if not messages:
            return stats
        records: list[Touchpoint | Conversion | GpuCall] = []
        arrivals: list[int] = []
        bounds: dict[int, tuple[int, int]] = {}
        for partition, offset, value, timestamp in messages:
            decoded = decode_spans(value, encoding)
            records.extend(decoded.records)
            arrivals.extend([timestamp] * len(decoded.records))
            stats.dead_letters += len(decoded.dead_letters)  # the stream dead-letters them
            first, last = bounds.get(partition, (offset, offset))
            bounds[partition] = (min(first, offset), max(last, offset))
        if len(bounds) != 1:
            raise ValueError("a batch holds the messages of one partition")
        ((partition, (first, last)),) = bounds.items()
        tables = tables_by_date(records, arrivals)
        stats.files = write_tables(self.root, tables,
                                   file_name(self.topic, partition, first, last)
                                   .removesuffix(".parquet"))
        for (kind, _), table in tables.items():
            stats.records[kind] += table.num_rows
        return stats


def archive_topic(bootstrap: str, topic: str, root: Path | str, encoding: str = "auto",
                  follow: bool = False, batch_messages: int = 5000, flush_s: float = 60.0,
                  properties: dict[str, str] | None = None,
                  progress: Callable[[str], None] | None = None,
                  idle_timeout_s: float = 60.0) -> BatchStats:
    """Archive `topic` from the stored offsets up to its end (or forever with follow);
    returns the totals. One batch per partition holds at most `batch_messages` messages
    (in follow mode also at most `flush_s` seconds of them). `idle_timeout_s`: the
    TopicReader's stop rule (pipelines/kafka/reader.py), giving up only after that long
    without progress."""
    archive = Archive(root, topic)
    start = archive.recover()
    total = BatchStats()
    pending: dict[int, list[Message]] = {}
    next_offset: dict[int, int] = {}  # after the last message pending, by partition

    def flush(partition: int) -> None:
        batch = pending.get(partition)
        if not batch:
            return
        stats = archive.write_batch(batch, encoding)
        archive.commit({partition: next_offset[partition]})
        pending[partition] = []
        total.messages += stats.messages
        total.dead_letters += stats.dead_letters
        total.files += stats.files
        for kind, count in stats.records.items():
            total.records[kind] += count
        if progress:
            progress(f"archived {topic} p{partition} up to offset "
                     f"{batch[-1][1]}: " + ", ".join(f"{n} {k}" for k, n in
                                                     stats.records.items()))

    with TopicReader(bootstrap, topic, Offsets(start), idle_timeout_s=idle_timeout_s,
                     max_records=batch_messages, client=properties,
                     what="archiving") as reader:
        if not reader.partitions:
            raise ValueError(f"topic {topic} does not exist on {bootstrap}")
        opened = time.monotonic()
        for polled in reader.batches(follow, empty=follow):  # a follower flushes by time
            for tp, records in polled.by_partition.items():
                pending.setdefault(tp.partition, []).extend(
                    (tp.partition, r.offset, r.value, r.timestamp) for r in records)
                next_offset[tp.partition] = polled.next_offsets[tp]
                if len(pending[tp.partition]) >= batch_messages:
                    flush(tp.partition)
            if follow and time.monotonic() - opened >= flush_s:
                for partition in list(pending):
                    flush(partition)
                opened = time.monotonic()
        for partition in list(pending):
            flush(partition)
        # offsets past the last record (transaction markers) are stored too, so a rerun
        # does not read them again
        archive.commit({tp.partition: offset for tp, offset in reader.offsets().items()})
    return total


# --- reading (the single-process engine and tests; Spark reads the folders itself) ------

def kind_path(root: Path | str, kind: str) -> Path:
    return Path(root) / kind


def read_kind(root: Path | str, kind: str, from_ms: int | None = None,
              until_ms: int | None = None) -> pd.DataFrame:
    """Records of one kind with event time in [from_ms, until_ms] (None: unbounded), read
    only from the date folders that can hold them; touchpoints and conversions with their
    `arrival_ms` (NO_ARRIVAL from files written before it was kept)."""
    folder = kind_path(root, kind)
    schema = file_schema(kind)
    if not folder.is_dir():
        return schema.empty_table().to_pandas()
    dataset = ds.dataset(folder, format="parquet", schema=schema.append(
        pa.field("date", pa.string())), partitioning="hive",
        exclude_invalid_files=False, ignore_prefixes=[".", "_"])
    column = ds.field(TIME_COLUMN[kind])
    condition = None
    if from_ms is not None:
        condition = (ds.field("date") >= day_of(from_ms)) & (column >= from_ms)
    if until_ms is not None:
        upper = (ds.field("date") <= day_of(until_ms)) & (column <= until_ms)
        condition = upper if condition is None else condition & upper
    table = dataset.to_table(columns=schema.names, filter=condition)
    if kind in ARRIVAL_KINDS:
        at = table.schema.get_field_index(ARRIVAL.name)
        table = table.set_column(at, ARRIVAL, pc.fill_null(table.column(at), NO_ARRIVAL))
    return table.to_pandas()
