"""No input can make the decoders raise, and the two decoders agree on every input:
property-based tests over arbitrary bytes, damaged valid messages, and OTLP/JSON with
extreme numbers, deep nesting and values of every type. Every input ends as events or
dead letters with a reason, and the attribution job's decoding operator never lets an
exception out (a poison record would otherwise restart the job forever)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.codec.frame import frame
from pipelines.flink.attribution.decode import DecodeOtlp
from pipelines.flink.attribution.support import ACCOUNTING, DEAD_LETTERS
from tests.flink_fakes import FakeContext, Timers
from tests.otlp_payloads import both, plain, random_payloads

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
VALID = random_payloads(seed=99, count=40)


def accounted(payload: bytes) -> None:
    """Both decoders give the same result, and it accounts for every span."""
    scanned, python = both(payload)
    assert plain(scanned) == plain(python)
    used = len(python.touches.ts_ms) + len(python.orders.ts_ms)
    assert python.records_in >= 1
    assert python.records_in == used + len(python.dead_letters) + python.ignored \
        + python.unbuilt_gpu_calls
    assert all(letter.reason and letter.detail for letter in python.dead_letters)


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(payload):
    accounted(payload or b"\x00")


@FUZZ
@given(st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                        max_size=6), st.integers(0, 10**6))
def test_damaged_valid_messages(message, flips, cut):
    body = bytearray(message)
    for at, value in flips:
        body[at % len(body)] = value
    accounted(bytes(body[:max(1, len(body) - cut % len(body))]))


# OTLP/JSON with any value where the decoders expect a number, a string or a list
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
EXTREME_NUMBER = st.sampled_from(["1e999", "-1e999", "1e308", "10" + "0" * 400, "-0",
                                  "1.5e18", '"17e17"', '"abc"', "null", "[]", "{}"])


@st.composite
def odd_json(draw) -> bytes:
    start = draw(EXTREME_NUMBER | st.integers(0, 2**70).map(str)
                 | ANY_JSON.map(json.dumps))
    revenue = draw(EXTREME_NUMBER | ANY_JSON.map(json.dumps))
    attrs = [{"key": "user.id", "value": {"stringValue": draw(st.text(max_size=4))}},
             {"key": draw(st.sampled_from(["marketing.channel", "order.id", "gpu.uuid"])),
              "value": {"stringValue": "x"}},
             {"key": "order.revenue", "value": json.loads('{"doubleValue": 0}')}]
    span = json.dumps({"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s",
                       "startTimeUnixNano": 0, "attributes": attrs,
                       "extra": draw(ANY_JSON)})
    span = span.replace('"startTimeUnixNano": 0', f'"startTimeUnixNano": {start}')
    span = span.replace('"doubleValue": 0', f'"doubleValue": {revenue}')
    depth = draw(st.sampled_from([0, 0, 0, 50, 5000]))
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}], \"deep\": "
            + "[" * depth + "]" * depth + "}").encode() if depth else (
        '{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()


@FUZZ
@given(odd_json())
def test_json_with_extreme_numbers_nesting_and_types(payload):
    accounted(payload)


@FUZZ
@given(st.binary(max_size=600) | st.sampled_from(VALID) | odd_json())
def test_the_decoding_operator_never_raises_and_counts_every_record(payload):
    operator = DecodeOtlp("auto", "spans", 4, correction_ms=86_400_000)
    for value in (frame(payload, 2, 9, 0), frame(None, 2, 10, 0), payload[:20]):
        outputs = list(operator.process_element(value, FakeContext(Timers())))
        (counts,) = [out[1] for out in outputs if out[0] is ACCOUNTING]
        messages, records_in, used, other, dead, late, gpu, tracing, duplicates, expired = counts
        assert messages == 1 and records_in == used + other + dead and duplicates == 0
        assert expired == 0  # only the journeys can find an event behind their state
        assert other == gpu + tracing
        assert dead == sum(out[0] is DEAD_LETTERS for out in outputs)
