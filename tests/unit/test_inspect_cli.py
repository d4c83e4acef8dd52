"""`seedance inspect` explains each span of a mixed file as the jobs decode it: touches
(with the rule that named the channel), orders, GPU calls, exposures, ignored spans and
dead letters with their reasons, and a message that cannot be read at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from jobs import cli
from pipelines.codec.otlp import request_to_json
from tests.otlp_payloads import T0
from tests.spans import make_spans

SHOP = "https://shop.example.com"
SPANS = [
    ("GET /landing", {"marketing.channel": "email", "user.id": "u1"}),
    ("GET /", {"url.full": f"{SHOP}/?utm_source=google&utm_medium=cpc&utm_campaign=brand",
               "enduser.id": "u2"}),
    ("GET /p/1", {"url.full": f"{SHOP}/p/1", "enduser.id": "u2",
                  "http.request.header.referer": (f"{SHOP}/",)}),
    ("GET /p/2", {"url.full": f"{SHOP}/p/2", "enduser.id": "u2"}),
    ("GET /?gclid", {"url.full": f"{SHOP}/?gclid=abc"}),
    ("POST /checkout", {"order.id": "o1", "order.revenue": 40.0, "user.id": "u2"}),
    ("POST /refund", {"order.id": "o2", "order.revenue": -5.0}),
    ("rank", {"gpu.uuid": "GPU-1", "gpu.workload": "ranker"}),
    ("GET /api/flags/x", {"feature_flag.key": "checkout", "feature_flag.result.variant": "b",
                          "user.id": "u3"}),
    ("SELECT", {"db.system.name": "postgresql"}),
]


def mixed_file(tmp_path: Path) -> Path:
    spans = make_spans([(name, attrs, T0 + n * 1_000_000)
                        for n, (name, attrs) in enumerate(SPANS)])
    lines = [request_to_json(encode_spans(spans[:6])), request_to_json(encode_spans(spans[6:])),
             b"{not json"]
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_inspect_explains_every_span_of_a_mixed_file(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = mixed_file(tmp_path)
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    verdicts = [line.split(": ", 1)[1] for line in out if line.startswith("  ")]
    assert verdicts == [
        "touch - user u1, channel email (its marketing.channel attribute)",
        "touch - user u2, channel paid_search, campaign brand (channel rule 'paid_search')",
        "ignored - a click inside the site or a direct visit (no campaign, no other site)",
        "ignored - an HTTP request that is no landing: no UTM parameter or click id in its "
        "URL and no referrer",
        "ignored - a landing without a user (enduser.id or user.id)",
        "order - order o1, revenue 40 USD, user u2",
        "dead letter - invalid conversion span: order.revenue is negative: -5.0",
        "gpu call - GPU GPU-1, workload ranker",
        "exposure - user u3, flag checkout, variant b (the experiments job reads it)",
        "ignored - ordinary tracing: no marketing.channel, order.id, gpu.uuid or HTTP URL",
    ], out
    assert out[0].startswith(f"message 1 ({path} line 1, 6 spans)")
    assert out[-2].startswith(f"message 3 ({path} line 3): a dead letter as a whole: "
                              "malformed_otlp_json")
    assert out[-1] == ("10 spans in 3 messages: 2 touch, 1 order, 1 gpu call, 1 exposure, "
                       "4 ignored, 1 dead letter; 1 messages unreadable")


def test_a_protobuf_file_is_one_message_and_the_limit_holds(tmp_path: Path, capsys) -> None:
    path = tmp_path / "one.bin"
    path.write_bytes(encode_spans(make_spans([("GET /", {"marketing.channel": "email",
                                                         "user.id": "u1"}, T0)]))
                     .SerializeToString())
    assert cli.main(["inspect", str(path), "--limit", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"message 1 ({path}, 1 spans):" and "channel email" in out[1]


def test_inspect_wants_a_file_or_a_topic(tmp_path: Path, capsys) -> None:
    assert cli.main(["inspect"]) == 2
    assert "give a FILE or --topic" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path / "none.json")]) == 2
    assert f"file not found: {tmp_path / 'none.json'}" in capsys.readouterr().err


def test_a_protobuf_message_that_opens_like_json_is_explained_as_protobuf() -> None:
    from pipelines.codec.span_report import inspect_message
    from tests.otlp_payloads import json_looking_protobuf

    payload = json_looking_protobuf()
    assert payload[:2] == b"\n{"
    report = inspect_message(payload)
    assert report.unreadable is None and report.spans


def test_inspect_reads_an_orders_change_stream_by_its_mapping(tmp_path: Path, capsys) -> None:
    """`--order-changes MAPPING`: each change event of a JSON-lines file (Debezium's, as a
    file sink or kcat writes them) with what it says of its order, and the totals."""
    row = {"id": 7, "customer_id": "u-1", "total_cents": 5000, "refunded_cents": 0,
           "currency": "usd", "status": "paid", "created_at": "2026-11-02T10:15:00Z"}
    source = {"schema": "shop", "table": "orders", "ts_ms": 1_794_200_000_000}
    events = [{"op": "c", "before": None, "after": row, "source": source},
              {"op": "u", "before": row, "after": {**row, "refunded_cents": 1000},
               "source": source},
              {"op": "u", "before": row, "after": {**row, "status": "cancelled"},
               "source": source},
              {"op": "d", "before": row, "after": None, "source": source},
              {"op": "u", "before": row, "after": {**row, "total_cents": "MTIz"},
               "source": source}]
    changes = tmp_path / "changes.jsonl"
    changes.write_text("\n".join(json.dumps({"schema": {}, "payload": event})
                                 for event in events) + "\n")
    mapping = Path(__file__).resolve().parents[2] / "jobs" / "config" / "order_changes.yaml"
    assert cli.main(["inspect", str(changes), "--order-changes", str(mapping)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("order 7 of u-1: order - created; revenue 50.00 USD")
    assert "correction - revenue 50 -> 40; revenue 50.00 -> 40.00 USD" in out[1]
    assert "refund - status 'paid' -> 'cancelled': withdrawn; revenue 50.00 -> 0.00" in out[2]
    assert "delete - the row was deleted" in out[3]
    assert "dead letter - revenue: column `total_cents` is 'MTIz'" in out[4]
    assert "decimal.handling.mode" in out[4]
    assert out[5] == ("5 messages: 1 order, 1 correction, 1 refund, 1 delete, 0 ignored, "
                      "1 dead letter")
    # a mapping that cannot be used stops with its file, line and field
    bad = tmp_path / "bad.yaml"
    bad.write_text("columns:\n  order_id: id\n")
    assert cli.main(["inspect", str(changes), "--order-changes", str(bad)]) == 2
    assert f"{bad}, line 1, `columns`: names no column for user_id, revenue" in \
        capsys.readouterr().err
