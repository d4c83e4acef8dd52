"""The attribution job's decoding (pipelines/codec/events.py): the C scanner and the Python
decoder give the same events, buckets, counts and dead letters, whatever the message."""

from __future__ import annotations

import random
import time

import numpy as np
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from pipelines.codec.events import (
    SCANNER_BUILT,
    by_bucket,
    decode_events,
    decode_packed,
    packed_by_bucket,
)
from pipelines.codec.otlp import decode_spans, request_to_json
from schemas.events import EventColumns, records_of
from schemas.records import Conversion, Touchpoint
from tests.otlp_payloads import BUCKETS, T0, both, plain, random_payloads
from tests.spans import make_spans
from udfs.journeys.book import bucket_of


def test_the_scanner_is_built():
    # the package builds it (setup.py); without it decoding is several times slower
    assert SCANNER_BUILT, "pipelines.codec._otlp_scan is missing: reinstall with a C compiler"


def test_scanner_and_python_decoder_agree_on_random_messages():
    scanned = 0
    kinds = {"touch": 0, "order": 0, "dead": 0}
    for payload in random_payloads(3, 300):
        fast, slow = both(payload)
        assert plain(fast) == plain(slow)
        scanned += fast.scanned
        kinds["touch"] += len(fast.touch_seq)
        kinds["order"] += len(fast.order_seq)
        kinds["dead"] += len(fast.dead_letters)
    assert scanned == 300  # well-formed protobuf: the scanner reads every one
    assert min(kinds.values()) > 50, kinds  # the draw makes every kind


def test_the_events_are_those_of_the_record_decoder():
    payload = random_payloads(5, 1)[0]
    records = decode_spans(payload, gpu_calls=False).records
    fast = decode_events(payload, BUCKETS)
    touches = [r for r in records if isinstance(r, Touchpoint)]
    orders = [r for r in records if isinstance(r, Conversion)]
    assert records_of(EventColumns(fast.touches, fast.orders)) == touches + orders
    assert fast.touch_bucket.tolist() == [bucket_of(t.user_id, BUCKETS) for t in touches]


def test_damaged_messages_give_the_same_dead_letters_and_events():
    rng = random.Random(11)
    payloads = random_payloads(7, 40)
    for payload in payloads:
        for _ in range(10):
            damaged = bytearray(payload)
            for _ in range(rng.randrange(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            cut = bytes(damaged[:rng.randrange(len(damaged) + 1)] if rng.random() < 0.3
                        else damaged)
            fast, slow = both(cut)
            assert plain(fast) == plain(slow)


def test_control_characters_are_dead_letters_on_both_paths():
    """No sink stores a NUL (PostgreSQL text refuses it): a touch or order whose text holds
    a control character is a dead letter naming the field and the character, scanned or
    not; other unusual characters (a no-break space) are text like any."""
    spans = make_spans([
        ("a", {"user.id": "ctl-\x00-user", "marketing.channel": "email"}, T0),
        ("b", {"user.id": "u2", "marketing.channel": "paid\x1bsearch"}, T0),
        ("c", {"user.id": "u3", "order.id": "o\x7f3", "order.revenue": 10.0}, T0),
        ("d", {"user.id": "u4", "marketing.channel": "email", "marketing.campaign": "c1\x9f"},
         T0),
        ("e", {"user.id": "nbsp\u00a0user", "marketing.channel": "email"}, T0),
    ])
    payload = encode_spans(spans).SerializePartialToString()
    fast, slow = both(payload)
    assert plain(fast) == plain(slow)
    assert [d.detail for d in fast.dead_letters] == [
        "invalid touchpoint span: user.id holds the control character U+0000 at 4",
        "invalid touchpoint span: marketing.channel holds the control character U+001B at 4",
        "invalid conversion span: order.id holds the control character U+007F at 1",
        "invalid touchpoint span: marketing.campaign holds the control character U+009F at 2"]
    assert fast.touches.user_id.tolist() == ["nbsp\u00a0user"]


def test_json_and_empty_messages_take_the_python_path():
    request = encode_spans(make_spans([("a", {"user.id": "u", "marketing.channel": "email"},
                                        T0)]))
    body = request_to_json(request)
    out = decode_events(body, BUCKETS)
    assert not out.scanned and out.touches.user_id.tolist() == ["u"]
    assert decode_packed(body, BUCKETS) is None
    empty = decode_events(b"", BUCKETS)
    assert empty.records_in == 1 and empty.dead_letters[0].reason == "empty_message"


def test_events_split_by_bucket_keep_their_order_and_drop_what_is_not_kept():
    payload = random_payloads(13, 1)[0]
    decoded = decode_events(payload, BUCKETS)
    keep_touches = np.arange(len(decoded.touch_seq)) % 2 == 0
    parts = by_bucket(decoded, keep_touches, None)
    touches = decoded.touches.user_id[keep_touches].tolist()
    for bucket, events in parts.items():
        mine = [u for u in touches if bucket_of(u, BUCKETS) == bucket]
        assert events.touches.user_id.tolist() == mine
        assert events.orders.user_id.tolist() == [
            u for u in decoded.orders.user_id.tolist() if bucket_of(u, BUCKETS) == bucket]
    assert sum(len(e.touches.ts_ms) for e in parts.values()) == int(keep_touches.sum())


def test_buckets_packed_at_once_equal_each_bucket_packed_on_its_own():
    """packed_by_bucket cuts each column packed once; the same bytes and strings, the same
    newest time, as packing each bucket's events (kept or not, one kind missing)."""
    from schemas.events import newest, packed_parts

    payloads = random_payloads(29, 12)
    for n, payload in enumerate(payloads):
        decoded = decode_events(payload, BUCKETS)
        keeps = [(None, None), (np.arange(len(decoded.touch_seq)) % 3 != 0, None),
                 (np.zeros(len(decoded.touch_seq), bool), None),
                 (None, np.zeros(len(decoded.order_seq), bool))]
        for keep in keeps:
            expected = {bucket: (newest(events), packed_parts(events))
                        for bucket, events in by_bucket(decoded, *keep).items()}
            assert packed_by_bucket(decoded, *keep) == expected, n
    held = decode_events(payloads[0], BUCKETS)
    held.touches.user_id[:] = ["a\x00b"] * len(held.touches.user_id)  # the separator
    assert len(held.touches.user_id) == 0 or packed_by_bucket(held) is None


def test_packed_batches_merged_equal_their_events_packed_together():
    """merged_parts joins packed batches without unpacking them: the events of each, in
    order, also where a batch is empty or one packed a column as a list (a value held
    the separator)."""
    import pickle

    from schemas.events import EMPTY, events_of, merged_parts, packed_parts, unpack

    batches = [events for payload in random_payloads(31, 20)
               for events in by_bucket(decode_events(payload, BUCKETS)).values()][:5]
    assert len(batches) == 5
    odd = events_of([Touchpoint("a\x00b", 5, "email", "", "t", "s")])
    for chosen in ([batches[0], batches[1]], [batches[0], EMPTY, batches[2]],
                   [batches[3], odd, batches[4]], [EMPTY, EMPTY]):
        merged = merged_parts([packed_parts(events) for events in chosen])
        together = [record for events in chosen for record in records_of(events)]
        assert records_of(unpack(pickle.dumps(merged))) == sorted(
            together, key=lambda r: isinstance(r, Conversion))  # touches, then orders


def test_a_packed_batch_comes_back_equal_even_when_a_value_holds_the_separator():
    from schemas.events import EMPTY, pack, unpack

    for payload in random_payloads(17, 20):
        for events in by_bucket(decode_events(payload, BUCKETS)).values():
            back = unpack(pack(events))
            assert [c.tolist() for part in back for c in part] == \
                [c.tolist() for part in events for c in part]
            assert [c.dtype for part in back for c in part] == \
                [c.dtype for part in events for c in part]
    odd = records_of(EMPTY) + [Touchpoint("a\x00b", 5, "email", "", "t", "s"),
                               Touchpoint("", 6, "x", "\x00", "", "")]
    from schemas.events import events_of
    assert records_of(unpack(pack(events_of(odd)))) == odd
    assert records_of(unpack(pack(EMPTY))) == []


def test_packed_buckets_are_the_events_of_each_bucket_when_every_span_is_plain():
    import pickle

    from schemas.events import unpack

    packed_messages = 0
    payloads = random_payloads(19, 150) + random_payloads(23, 150, plain_only=True)
    for payload in payloads:
        packed = decode_packed(payload, BUCKETS)
        decoded = decode_events(payload, BUCKETS)
        if packed is None:
            continue
        packed_messages += 1
        assert decoded.dead_letters == []
        assert (packed.spans, packed.ignored, packed.unbuilt_gpu_calls) == (
            decoded.spans, decoded.ignored, decoded.unbuilt_gpu_calls)
        seq = np.concatenate([decoded.touch_seq, decoded.order_seq])
        ts = np.concatenate([decoded.touches.ts_ms, decoded.orders.ts_ms])
        assert packed.ts_ms.tolist() == ts[np.argsort(seq, kind="stable")].tolist()
        expected = by_bucket(decoded)
        assert sorted(packed.buckets) == sorted(expected)
        for bucket, (newest, events) in packed.buckets.items():
            back = unpack(pickle.dumps(events))
            assert records_of(back) == records_of(expected[bucket])
            assert newest == max(back.touches.ts_ms.max(initial=-1),
                                 back.orders.ts_ms.max(initial=-1))
    assert packed_messages > 100  # most plain messages take the packed path
    # a value holding a NUL is left to the general path
    nul = encode_spans(make_spans([("a", {"user.id": "u\x00v", "marketing.channel": "e"},
                                        T0)])).SerializePartialToString()
    assert decode_packed(nul, BUCKETS) is None
    # ... which dead-letters it: no sink stores a NUL
    general = decode_events(nul, BUCKETS)
    assert general.touches.user_id.tolist() == []
    assert [d.detail for d in general.dead_letters] == [
        "invalid touchpoint span: user.id holds the control character U+0000 at 1"]


def test_a_span_ahead_of_the_clock_is_a_dead_letter_past_the_configured_limit():
    """A skewed clock: a touch 50 minutes ahead is a dead letter under the 5-minute default
    (it would move its partition's event time and make the next spans late), a touch 4
    minutes ahead is data; a config that allows an hour takes both. Scanner and Python
    decoder alike."""
    from pipelines.codec.events import decode_message

    now = time.time_ns()
    spans = make_spans([("ahead", {"user.id": "u1", "marketing.channel": "email"},
                         now + 50 * 60 * 10**9),
                        ("near", {"user.id": "u2", "marketing.channel": "email"},
                         now + 4 * 60 * 10**9)])
    payload = encode_spans(spans).SerializePartialToString()
    for scanner in (True, False):
        strict = decode_events(payload, BUCKETS, scanner=scanner)
        assert strict.touches.user_id.tolist() == ["u2"]
        assert [d.detail for d in strict.dead_letters] == [
            "invalid touchpoint span: start_time_unix_nano is more than 300s ahead of the "
            "clock (event_time.max_future_s)"]
        loose = decode_events(payload, BUCKETS, scanner=scanner, max_future_s=3600)
        assert loose.touches.user_id.tolist() == ["u1", "u2"] and not loose.dead_letters
    assert isinstance(decode_message(payload, BUCKETS, max_future_s=3600), tuple)  # packed


def test_a_1970_span_is_a_dead_letter_on_every_path_and_json_may_open_with_a_bom():
    """A touch dated 1970 (an unset clock) is a dead letter, never an event that would then
    count as late -- on the plain and the general path alike; OTLP/JSON written with a
    UTF-8 byte-order mark is JSON, not a protobuf to dead-letter."""
    spans = make_spans([("old", {"user.id": "u1", "marketing.channel": "email"}, 10**9),
                        ("now", {"user.id": "u2", "marketing.channel": "email"}, T0)])
    payload = encode_spans(spans).SerializePartialToString()
    for scanner in (True, False):
        decoded = decode_events(payload, BUCKETS, scanner=scanner)
        assert decoded.touches.user_id.tolist() == ["u2"]
        assert [d.detail for d in decoded.dead_letters] == [
            "invalid touchpoint span: start_time_unix_nano is before 2000-01-01"]
    assert decode_spans(payload).dead_letters[0].detail.endswith("before 2000-01-01")
    as_json = request_to_json(encode_spans(make_spans(
        [("a", {"user.id": "u3", "marketing.channel": "email"}, T0)])))
    with_bom = b"\xef\xbb\xbf" + as_json
    decoded = decode_events(with_bom, BUCKETS)
    assert decoded.touches.user_id.tolist() == ["u3"] and not decoded.dead_letters
