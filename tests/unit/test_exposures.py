"""Experiment exposures (feature-flag attributes on spans) as the experiments job reads
them: from protobuf and JSON alike, on any kind of span, invalid ones dead-lettered with
the reason, and the attribution decoders unaffected by them."""

import json

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from pipelines.codec.exposures import decode_exposures
from pipelines.codec.otlp import decode_spans, request_to_json
from schemas.records import Exposure, Touchpoint
from tests.spans import make_spans

T0 = 1_756_684_800_000_000_000  # 2025-09-01T00:00:00Z in ns
MS = T0 // 1_000_000


def spans():
    return make_spans([
        # a landing request that is a touchpoint and an exposure at once
        ("GET /landing", {"user.id": "u1", "marketing.channel": "email",
                          "feature_flag.key": "bidding",
                          "feature_flag.result.variant": "dynamic"}, T0),
        # an exposure span of its own; the user from the flag's targeting key
        ("GET /api/flags", {"feature_flag.key": "copy", "feature_flag.variant": "short",
                            "feature_flag.context.id": "u2"}, T0 + 1_000_000),
        ("GET /api/flags", {"user.id": "u3", "feature_flag.key": "copy"}, T0),  # no variant
        ("GET /api/flags", {"feature_flag.key": "copy",
                            "feature_flag.result.variant": "long"}, T0),  # no user
        ("SELECT", {"db.system.name": "postgresql"}, T0),
    ])


def test_exposures_from_protobuf_and_json_agree():
    request = encode_spans(spans())
    for payload in (request.SerializePartialToString(), request_to_json(request)):
        out = decode_exposures(payload)
        assert out.spans == 5 and not out.unreadable
        assert [(e.user_id, e.ts_ms, e.flag_key, e.variant) for e in out.exposures] == [
            ("u1", MS, "bidding", "dynamic"), ("u2", MS + 1, "copy", "short")]
        assert all(isinstance(e, Exposure) and len(e.trace_id) == 32 for e in out.exposures)
        details = sorted(letter.detail for letter in out.dead_letters)
        assert details == ["invalid exposure span: feature_flag.result.variant is missing",
                           "invalid exposure span: user.id is missing (and so is "
                           "feature_flag.context.id)"]
        assert all(json.loads(letter.payload)["attributes"]["feature_flag.key"] == "copy"
                   for letter in out.dead_letters)


def test_the_attribution_decoders_do_not_see_exposures():
    payload = encode_spans(spans()).SerializePartialToString()
    out = decode_spans(payload)
    assert out.dead_letters == []  # an invalid exposure is not the attribution job's
    assert [type(r) for r in out.records] == [Touchpoint] and out.ignored == 4


def test_what_is_not_otlp_is_unreadable_here_not_a_dead_letter():
    for payload in (b"", b"not otlp at all", b"\x0a\xff\xff\xff\x0f\x01", b"[1, 2]"):
        out = decode_exposures(payload)
        assert out.unreadable and out.exposures == [] and out.dead_letters == []
