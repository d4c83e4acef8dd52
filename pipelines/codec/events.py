"""OTLP messages -> touchpoints and orders as columns, by user bucket: the attribution
job's decoding.

Protobuf messages go through the C scanner (pipelines/codec/otlp_scan.c, built with the package)
when it is there: it reads the wire bytes once and fills the columns of every span that is
plainly a touch or an order, counts the plainly valid GPU calls and plain tracing spans,
and names the rest, which `pipelines.codec.otlp` decodes span by span exactly as it
decodes any message (dead letters included). A message the scanner does not accept whole
(anything unusual about its bytes), JSON, and every message when the scanner is not built
go through `otlp_codec.decode_spans` alone. Either way the result is the same
(tests/unit/test_otlp_events.py holds them to it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from pipelines.codec.otlp import (
    MAX_FUTURE_S,
    Decoded,
    decode_proto_spans,
    decode_spans,
    sniff_encoding,
)
from schemas.events import (
    EventColumns,
    OrderColumns,
    PackedParts,
    TouchColumns,
    concat,
    object_array,
    order_columns,
    packed_split,
    take,
    touch_columns,
)
from schemas.records import Conversion, DeadLetter, Touchpoint
from udfs.journeys import bucket_of, key_runs

try:  # built by `pip install` (setup.py) where a C compiler is found
    from pipelines.codec import _otlp_scan
except ImportError:  # pragma: no cover - exercised where no compiler is present
    _otlp_scan = None

SCANNER_BUILT = _otlp_scan is not None


@dataclass
class DecodedEvents:
    """What one Kafka message turned into: each kind of event in message order, with the
    place in the message (`*_seq`, the span's number) and the user bucket of each."""

    touches: TouchColumns
    orders: OrderColumns
    touch_seq: np.ndarray
    order_seq: np.ndarray
    touch_bucket: np.ndarray
    order_bucket: np.ndarray
    dead_letters: list[DeadLetter] = field(default_factory=list)
    spans: int = 0
    ignored: int = 0
    unbuilt_gpu_calls: int = 0
    scanned: bool = False  # the C scanner read it (tests and benchmarks ask)

    @property
    def records_in(self) -> int:
        """Spans, or 1 for a message that could not be split into spans."""
        return self.spans or len(self.dead_letters)


def decode_events(payload: bytes | None, buckets: int, encoding: str = "auto",
                  scanner: bool = True, max_future_s: float = MAX_FUTURE_S) -> DecodedEvents:
    """Decode one message for the attribution job (GPU calls checked, not built). Never
    raises: malformed input becomes dead letters. `scanner=False` skips the C path. A span
    starting more than `max_future_s` ahead of the clock is a dead letter."""
    latest_ns = time.time_ns() + int(max_future_s * 1e9)
    if payload and scanner and _otlp_scan is not None and (
            encoding == "otlp_proto" or (encoding == "auto"
                                         and sniff_encoding(payload) == "otlp_proto")):
        scanned = _otlp_scan.scan(payload, latest_ns, buckets)
        if scanned is not None:
            return _from_scan(payload, scanned, latest_ns, buckets)
    decoded = decode_spans(payload, encoding, gpu_calls=False, max_future_s=max_future_s)
    return _from_records(decoded, np.arange(len(decoded.records)), buckets)


class PackedMessage(NamedTuple):
    """A message every span of which the scanner read plainly: its events already packed
    per user bucket (schemas.events.pack's form, before pickling)."""

    spans: int
    unbuilt_gpu_calls: int
    ignored: int
    ts_ms: np.ndarray  # every touch's and order's time, in message order
    buckets: dict[int, tuple[int, tuple]]  # bucket -> (newest time, packed events)


def decode_packed(payload: bytes | None, buckets: int, encoding: str = "auto",
                  max_future_s: float = MAX_FUTURE_S) -> PackedMessage | None:
    """The fast path of `decode_events` for a message with nothing unusual in it (no span
    for the general rules, hence no dead letters): no Python object is made per event.
    None: use `decode_events`."""
    if not payload or _otlp_scan is None or not (
            encoding == "otlp_proto" or (encoding == "auto"
                                         and sniff_encoding(payload) == "otlp_proto")):
        return None
    latest_ns = time.time_ns() + int(max_future_s * 1e9)
    scanned = _otlp_scan.scan_packed(payload, latest_ns, buckets)
    if scanned is None:
        return None
    spans, unbuilt, ignored, ts_ms, by_bucket = scanned
    return PackedMessage(spans, unbuilt, ignored, np.frombuffer(ts_ms, np.int64), by_bucket)


class PackedSegment(NamedTuple):
    """Consecutive messages scanned together (`scan_group`): messages first..end-1, each
    bucket's events of all of them as one packed batch, with each order's message."""

    first: int
    end: int
    buckets: dict[int, tuple[int, tuple, bytes]]  # bucket -> (newest, packed, order msgs)


class ScannedMessage(NamedTuple):
    """What `scan_group` took of one message: its spans, GPU calls counted (not built),
    plain tracing spans, events in the segment's batches, events left out as late by
    arrival, and its spans left to the general rules (None: none)."""

    spans: int
    unbuilt_gpu_calls: int
    ignored: int
    events: int
    late: int
    general: bytes | None


class ScannedGroup(NamedTuple):
    """Per message, what the scan took of it, or None (left to the caller:
    `decode_message`, or a held order to set apart); the segments. A message's events
    before its `min_ts` are left out of the segment's buckets (the caller reads them from
    the message), as are its spans for the general rules (`general_spans` decodes
    them)."""

    messages: list[ScannedMessage | None]
    segments: list[PackedSegment]
    latest_ns: int  # a span starting after it was judged from the future


def scan_group(payloads: list[bytes | None], buckets: int, encoding: str,
               max_future_s: float, min_ts: list[int], order_after: int) -> ScannedGroup | None:
    """The fast path of `decode_packed` for a group of messages at once: each bucket's
    events of consecutive plain messages as one packed batch, less each message's events
    before its `min_ts` (late by arrival: counted, left out). A message is left to the
    caller when it is not plain protobuf, or holds an order at or before `order_after`.
    None: the scanner is not built."""
    if _otlp_scan is None:
        return None
    plain = [payload if payload and (encoding == "otlp_proto" or (
        encoding == "auto" and sniff_encoding(payload) == "otlp_proto")) else None
        for payload in payloads]
    latest_ns = time.time_ns() + int(max_future_s * 1e9)
    messages, segments = _otlp_scan.scan_packed_group(plain, latest_ns, buckets, min_ts,
                                                      order_after)
    return ScannedGroup([None if scanned is None else ScannedMessage(*scanned)
                         for scanned in messages],
                        [PackedSegment(*segment) for segment in segments], latest_ns)


def general_spans(payload: bytes, general: bytes, latest_ns: int) -> Decoded:
    """The spans `scan_group` left to the general rules in a message, decoded by them
    (GPU calls counted, not built): mostly dead letters; a touch or an order among the
    records means the message must be decoded whole, in order."""
    quads = np.frombuffer(general, np.int32).reshape(-1, 4)
    decoded, _ = decode_proto_spans(payload, quads[:, :3].tolist(), latest_ns,
                                    gpu_calls=False)
    return decoded


def decode_message(payload: bytes | None, buckets: int, encoding: str = "auto",
                   max_future_s: float = MAX_FUTURE_S) -> PackedMessage | DecodedEvents:
    """How the attribution job decodes a message: packed buckets where every span is plain
    (`decode_packed`), `decode_events` otherwise."""
    packed = decode_packed(payload, buckets, encoding, max_future_s)
    return packed if packed is not None else decode_events(
        payload, buckets, encoding, max_future_s=max_future_s)


def _from_scan(payload: bytes, scanned: tuple, latest_ns: int, buckets: int) -> DecodedEvents:
    spans, unbuilt, ignored, touches, orders, general = scanned
    t_seq, t_bucket, t_ts, t_user, t_channel, t_campaign, t_trace, t_span = touches
    o_seq, o_bucket, o_ts, o_user, o_order, o_revenue, o_currency, o_trace, o_span = orders
    out = DecodedEvents(
        TouchColumns(object_array(t_user), np.frombuffer(t_ts, np.int64), object_array(t_channel),
                     object_array(t_campaign), object_array(t_trace), object_array(t_span)),
        OrderColumns(object_array(o_user), np.frombuffer(o_ts, np.int64), object_array(o_order),
                     np.frombuffer(o_revenue, np.float64), object_array(o_currency),
                     object_array(o_trace), object_array(o_span)),
        np.frombuffer(t_seq, np.int32), np.frombuffer(o_seq, np.int32),
        np.frombuffer(t_bucket, np.int32), np.frombuffer(o_bucket, np.int32),
        spans=spans, ignored=ignored, unbuilt_gpu_calls=unbuilt, scanned=True)
    if general:
        # the spans the scanner left to the general rules, decoded one by one
        quads = np.frombuffer(general, np.int32).reshape(-1, 4)
        decoded, origin = decode_proto_spans(payload, quads[:, :3].tolist(), latest_ns,
                                             gpu_calls=False)
        rest = _from_records(decoded, quads[origin, 3] if origin else np.zeros(0, np.int32),
                             buckets)
        out = _merged(out, rest)
        out.spans, out.ignored = spans, ignored + decoded.ignored
        out.unbuilt_gpu_calls = unbuilt + decoded.unbuilt_gpu_calls
        out.dead_letters = decoded.dead_letters
    return out


def _from_records(decoded: Decoded, seq: np.ndarray, buckets: int) -> DecodedEvents:
    touches = [r for r in decoded.records if type(r) is Touchpoint]
    orders = [r for r in decoded.records if type(r) is Conversion]
    is_touch = np.fromiter((type(r) is Touchpoint for r in decoded.records), bool,
                           len(decoded.records))
    return DecodedEvents(
        touch_columns(touches), order_columns(orders),
        np.asarray(seq, np.int32)[is_touch], np.asarray(seq, np.int32)[~is_touch],
        _buckets(touches, buckets), _buckets(orders, buckets),
        dead_letters=decoded.dead_letters, spans=decoded.spans, ignored=decoded.ignored,
        unbuilt_gpu_calls=decoded.unbuilt_gpu_calls)


def _buckets(records: list, buckets: int) -> np.ndarray:
    return np.fromiter((bucket_of(r.user_id, buckets) for r in records), np.int32,
                       len(records))


def _merged(a: DecodedEvents, b: DecodedEvents) -> DecodedEvents:
    """Both messages' events of each kind, in message order."""
    touch_seq = np.concatenate([a.touch_seq, b.touch_seq])
    order_seq = np.concatenate([a.order_seq, b.order_seq])
    by_touch, by_order = np.argsort(touch_seq, kind="stable"), np.argsort(order_seq,
                                                                          kind="stable")
    return DecodedEvents(
        take(concat([a.touches, b.touches]), by_touch),
        take(concat([a.orders, b.orders]), by_order),
        touch_seq[by_touch], order_seq[by_order],
        np.concatenate([a.touch_bucket, b.touch_bucket])[by_touch],
        np.concatenate([a.order_bucket, b.order_bucket])[by_order],
        scanned=a.scanned)


def by_bucket(decoded: DecodedEvents, keep_touches: np.ndarray | None = None,
              keep_orders: np.ndarray | None = None) -> dict[int, EventColumns]:
    """The (kept) events of each bucket, each kind in message order."""
    touches, touch_bucket, orders, order_bucket = _kept(decoded, keep_touches, keep_orders)
    out: dict[int, EventColumns] = {}
    touch_parts, order_parts = _split(touch_bucket), _split(order_bucket)
    for bucket in sorted(touch_parts.keys() | order_parts.keys()):
        out[bucket] = EventColumns(
            take(touches, touch_parts.get(bucket, _NONE)),
            take(orders, order_parts.get(bucket, _NONE)))
    return out


_NONE = np.zeros(0, np.int64)


def _kept(decoded: DecodedEvents, keep_touches: np.ndarray | None,
          keep_orders: np.ndarray | None
          ) -> tuple[TouchColumns, np.ndarray, OrderColumns, np.ndarray]:
    """The kept touches and orders (all where no mask), each with its rows' buckets."""
    touches, orders = decoded.touches, decoded.orders
    touch_bucket, order_bucket = decoded.touch_bucket, decoded.order_bucket
    if keep_touches is not None:
        touches, touch_bucket = take(touches, keep_touches), touch_bucket[keep_touches]
    if keep_orders is not None:
        orders, order_bucket = take(orders, keep_orders), order_bucket[keep_orders]
    return touches, touch_bucket, orders, order_bucket


def packed_by_bucket(decoded: DecodedEvents, keep_touches: np.ndarray | None = None,
                     keep_orders: np.ndarray | None = None
                     ) -> dict[int, tuple[int, PackedParts]] | None:
    """`by_bucket`'s batches as `packed_parts` packs them, each with its newest event time:
    each column packed once for the message and cut per bucket (a message spread over
    many buckets costs a few slices per bucket, not a packing). None: a value holds the
    packing's separator (use `by_bucket`)."""
    touches, touch_bucket, orders, order_bucket = _kept(decoded, keep_touches, keep_orders)
    touch_order, touch_bounds = key_runs(touch_bucket)
    order_order, order_bounds = key_runs(order_bucket)
    buckets = sorted(touch_bounds.keys() | order_bounds.keys())
    empty = (0, 0)
    touch_cuts = [touch_bounds.get(bucket, empty) for bucket in buckets]
    order_cuts = [order_bounds.get(bucket, empty) for bucket in buckets]
    touch_parts = packed_split(tuple(touches), touch_order, touch_cuts)
    order_parts = packed_split(tuple(orders), order_order, order_cuts)
    if touch_parts is None or order_parts is None:
        return None
    touch_ts, order_ts = touches.ts_ms[touch_order], orders.ts_ms[order_order]
    out: dict[int, tuple[int, PackedParts]] = {}
    for k, bucket in enumerate(buckets):
        (t_start, t_end), (o_start, o_end) = touch_cuts[k], order_cuts[k]
        newest = max(int(touch_ts[t_start:t_end].max()) if t_end > t_start else -(2**63),
                     int(order_ts[o_start:o_end].max()) if o_end > o_start else -(2**63))
        out[bucket] = (newest, (t_end - t_start, o_end - o_start, touch_parts[k],
                                order_parts[k]))
    return out


def by_order_bucket(orders: list[tuple], buckets: int) -> dict[int, list[tuple]]:
    """Orders (tuples in Conversion's field order) by the bucket of their order id: copies
    of one order meet in one bucket, whatever user sent them."""
    out: dict[int, list[tuple]] = {}
    for order in orders:
        out.setdefault(bucket_of(order[2], buckets), []).append(order)
    return out


def _split(bucket: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each bucket's rows, in their order (one sort, not a mask per bucket)."""
    order, bounds = key_runs(bucket)
    return {value: order[start:end] for value, (start, end) in bounds.items()}
