"""Kafka records as the attribution job's source hands them to Python: a fixed header, then
the value as it came (written by io.seedance.flink.FramedOtlpDeserializer, pipelines/jvm).

The header says where the record came from (a dead letter names its partition and offset),
whether its value was null (a tombstone is dead-lettered, not dropped), its Kafka timestamp
(when it arrived: with its events' times it decides which of them count, udfs/journeys/arrival.py),
its event time (its newest span start; the source's per-partition watermarks follow it) and
the newest event time of its partition before it (kept in the layout; nothing decides by it
since lateness is decided by arrival).
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

HEADER = struct.Struct(">BBiqqqq")
VERSION = 1
NULL_VALUE = 1
NO_TIME = -(2**63)  # the header's "none"
# what the decoders take for "no newest time yet": far below any real time, yet with room
# to subtract the allowed lateness without wrapping around
NEVER = -(2**62)


class Framed(NamedTuple):
    partition: int
    offset: int
    kafka_timestamp_ms: int
    event_time_ms: int  # NO_TIME: the record had no readable span start
    partition_newest_ms: int  # newest event time of the partition before it; NEVER if none
    value: bytes | None  # None: the record's value was null


def frame(value: bytes | None, partition: int = 0, offset: int = 0, kafka_timestamp_ms: int = 0,
          event_time_ms: int = NO_TIME, partition_newest_ms: int = NO_TIME) -> bytes:
    """The framed form of a record (the source writes it; tests and benchmarks use this)."""
    head = HEADER.pack(VERSION, NULL_VALUE if value is None else 0, partition, offset,
                       kafka_timestamp_ms, event_time_ms, partition_newest_ms)
    return head + (value or b"")


def unframe(record: bytes) -> Framed:
    if len(record) < HEADER.size:
        raise ValueError(f"a framed record has at least {HEADER.size} bytes, got {len(record)}")
    version, flags, partition, offset, timestamp, event_time, newest = HEADER.unpack_from(record)
    if version != VERSION:
        raise ValueError(f"framed record version {version}; this decoder reads {VERSION}")
    value = None if flags & NULL_VALUE else record[HEADER.size:]
    return Framed(partition, offset, timestamp, event_time,
                  NEVER if newest == NO_TIME else max(newest, NEVER), value)


# --- groups of records: io.seedance.flink.FrameBatches joins consecutive framed records
# into one element (the decoder is then called once per group, and sends one batch per
# user bucket per group); a group of one is the record itself

GROUP = 2
_COUNT = struct.Struct(">i")


def group_frames(records: list[bytes]) -> bytes:
    """Framed records as FrameBatches joins them (tests and benchmarks use this)."""
    if len(records) == 1:
        return records[0]
    return bytes([GROUP]) + _COUNT.pack(len(records)) + b"".join(
        _COUNT.pack(len(record)) + record for record in records)


def ungroup(element: bytes) -> list[bytes]:
    """The framed records of an element: those of a group, or the element itself."""
    if not element or element[0] != GROUP:
        return [element]
    if len(element) < 1 + _COUNT.size:
        raise ValueError(f"a group of framed records is cut short at {len(element)} bytes")
    (count,), at, out = _COUNT.unpack_from(element, 1), 1 + _COUNT.size, []
    for _ in range(count):
        if at + _COUNT.size > len(element):
            raise ValueError(f"a group of {count} framed records is cut short after "
                             f"{len(out)}")
        (size,) = _COUNT.unpack_from(element, at)
        at += _COUNT.size
        if size < 0 or at + size > len(element):
            raise ValueError(f"record {len(out)} of a group of {count} is cut short")
        out.append(element[at:at + size])
        at += size
    if at != len(element):
        raise ValueError(f"a group of {count} framed records has {len(element) - at} bytes "
                         "after its last record")
    return out


# --- the event time the source stamps a record with (io.seedance.flink.OtlpEventTime, the
# one the job runs; this is its reference, for tests and for driving the operators without
# a JVM)

MIN_EVENT_MS = 946_684_800_000  # 2000-01-01T00:00:00Z


class _Malformed(Exception):
    pass


class Signal(NamedTuple):
    """Where an OTLP request's times are: the fields descended at each depth (any of a set),
    the time's field (fixed64 ns) there, and its OTLP/JSON keys."""

    path: tuple[frozenset[int], ...]
    time_field: int
    json: re.Pattern[bytes]


def _json_time(*keys: str) -> re.Pattern[bytes]:
    names = "|".join(keys).encode()
    return re.compile(rb'"(?:' + names + rb')"[ \t\r\n]*:[ \t\r\n]*'
                      rb'(?:"([0-9]{1,19})"|([0-9]{1,19})(?![0-9.eE]))')


# request.resource_spans(1).scope_spans(2).spans(2).start_time_unix_nano(7)
TRACES = Signal((frozenset({1}), frozenset({2}), frozenset({2})), 7,
                _json_time("startTimeUnixNano", "start_time_unix_nano"))
# request.resource_metrics(1).scope_metrics(2).metrics(2).{gauge(5), sum(7), histogram(9),
# exponential_histogram(10), summary(11)}.data_points(1).time_unix_nano(3)
METRICS = Signal((frozenset({1}), frozenset({2}), frozenset({2}),
                  frozenset({5, 7, 9, 10, 11}), frozenset({1})), 3,
                 _json_time("timeUnixNano", "time_unix_nano"))


def newest_start_ms(value: bytes | None, max_ms: int, min_ms: int = MIN_EVENT_MS,
                    signal: Signal = TRACES) -> int:
    """The newest event time (ms) in [min_ms, max_ms] of an OTLP request, protobuf or JSON
    — a trace request's newest span start, a metrics request's newest data point; NO_TIME
    when there is none or the bytes are unreadable."""
    if not value:
        return NO_TIME
    if value.lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        found = _json_newest(value, min_ms, max_ms, signal)
        if found != NO_TIME or value[:1] != b"\n":
            return found
    try:
        return _proto_newest(value, 0, len(value), 0, min_ms, max_ms, signal)
    except _Malformed:
        return NO_TIME


def _varint(b: bytes, at: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        if at >= end:
            raise _Malformed
        byte = b[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & (2**64 - 1), at
        shift += 7
    raise _Malformed


def _proto_newest(b: bytes, at: int, end: int, depth: int, min_ms: int, max_ms: int,
                  signal: Signal) -> int:
    leaf = depth == len(signal.path)
    newest = NO_TIME
    start = NO_TIME
    while at < end:
        tag, at = _varint(b, at, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, at = _varint(b, at, end)
        elif wire == 1:
            if end - at < 8:
                raise _Malformed
            if leaf and field == signal.time_field:
                start = int.from_bytes(b[at:at + 8], "little")
            at += 8
        elif wire == 2:
            length, at = _varint(b, at, end)
            if length > end - at:
                raise _Malformed
            if not leaf and field in signal.path[depth]:
                newest = max(newest, _proto_newest(b, at, at + length, depth + 1, min_ms,
                                                   max_ms, signal))
            at += length
        elif wire == 5:
            if end - at < 4:
                raise _Malformed
            at += 4
        else:
            raise _Malformed
    if leaf:
        return _in_range(start // 1_000_000 if start != NO_TIME else NO_TIME, min_ms, max_ms)
    return newest


def _in_range(ms: int, min_ms: int, max_ms: int) -> int:
    return ms if ms != NO_TIME and min_ms <= ms <= max_ms else NO_TIME


def _json_newest(value: bytes, min_ms: int, max_ms: int, signal: Signal) -> int:
    newest = NO_TIME
    for quoted, bare in signal.json.findall(value):
        ns = int(quoted or bare)
        if ns < 2**63:
            newest = max(newest, _in_range(ns // 1_000_000, min_ms, max_ms))
    return newest
