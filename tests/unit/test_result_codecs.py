"""The gpu_costs and roi topics' codecs (pipelines/codec/gpu_cost_messages.py,
roi_messages.py): what `encode` writes `decode` reads back, field for field, as the rows
schemas/rows.py declares; a message that is not one fails with an error that says why."""

from __future__ import annotations

import json

import pytest

from pipelines.codec import gpu_cost_messages, roi_messages
from schemas import rows

CALL = {"gpu_uuid": "GPU-1", "interval_end_ms": 1_790_000_010_000, "trace_id": "ab" * 16,
        "span_id": "cd" * 8, "interval_start_ms": 1_790_000_000_000, "model": "L40S",
        "workload": "ranking", "pod": "p", "namespace": "shop", "user_id": "u1",
        "gpu_seconds": 1.5, "cost_usd": 0.002, "interval_cost_usd": 0.01,
        "price_known": True}
IDLE = {"gpu_uuid": "GPU-1", "interval_end_ms": 1_790_000_010_000,
        "interval_start_ms": 1_790_000_000_000, "model": "L40S", "idle_seconds": 4.0,
        "cost_usd": 0.008, "interval_cost_usd": 0.01, "price_known": False}
ROI = {"model": "last_click", "day": "2026-10-01", "dimension": "channel", "key": "email",
       "conversions": 2.0, "revenue": 30.0, "ad_spend": 5.0, "compute_cost": 1.0,
       "roi": 4.0, "roas": 6.0, "margin_roi": 1.5, "currency": "USD"}


@pytest.mark.parametrize(("kind", "values", "row"), [
    (gpu_cost_messages.CALL, CALL, rows.GPU_CALL_COST),
    (gpu_cost_messages.IDLE, IDLE, rows.GPU_IDLE_COST)])
def test_gpu_cost_rows_round_trip(kind, values, row):
    text = gpu_cost_messages.encode(kind, {**values, "extra": "left out"})
    assert json.loads(text) == {"kind": kind, **values}  # the form on the topic
    message = gpu_cost_messages.decode(text.encode())
    assert message == (kind, values)
    assert gpu_cost_messages.row(message) == tuple(values[name] for name in row.names)


def test_an_unobserved_gpu_cost_message_round_trips_and_is_no_row():
    values = {"gpu_uuid": "GPU-2", "until_ms": 5, "unobserved_ms": 3}
    message = gpu_cost_messages.decode(gpu_cost_messages.encode("unobserved", values))
    assert message == ("unobserved", values)
    with pytest.raises(gpu_cost_messages.GpuCostMessageError, match="is no row"):
        gpu_cost_messages.row(message)


@pytest.mark.parametrize(("value", "says"), [
    (b"\xff\xfe not json", "is not JSON"),
    (b"[1, 2]", "is not a JSON object: list"),
    (json.dumps({"gpu_uuid": "GPU-1"}).encode(), "without a kind"),
])
def test_a_malformed_gpu_cost_message_says_why(value, says):
    with pytest.raises(gpu_cost_messages.GpuCostMessageError, match=says):
        gpu_cost_messages.decode(value)


def test_a_gpu_cost_message_missing_a_field_says_which():
    partial = {k: v for k, v in IDLE.items() if k != "idle_seconds"}
    with pytest.raises(ValueError, match="kind idle: field 'idle_seconds' is missing"):
        gpu_cost_messages.row(gpu_cost_messages.decode(json.dumps({"kind": "idle",
                                                                   **partial})))
    with pytest.raises(ValueError, match="field 'idle_seconds' is missing"):
        gpu_cost_messages.encode("idle", partial)
    with pytest.raises(ValueError, match="no kind 'busy'"):
        gpu_cost_messages.encode("busy", IDLE)


@pytest.mark.parametrize("kind", sorted(roi_messages.ROWS))
def test_roi_rows_round_trip_with_their_keys(kind):
    layout = roi_messages.ROWS[kind]
    values = {name: f"{name}-value" for name in layout.names}
    key, text = roi_messages.encode(kind, {**values, "extra": 1})
    assert key == (kind, *(values[name] for name in layout.key))
    assert json.loads(text) == {"kind": kind, **values}
    message = roi_messages.decode(text)
    assert message == (kind, values, False)
    assert roi_messages.row(message) == tuple(values[name] for name in layout.names)


def test_a_withdrawn_roi_key_round_trips_and_old_rows_lack_the_ratios():
    key, text = roi_messages.encode(roi_messages.ROI, ROI, withdrawn=True)
    assert json.loads(text)["withdrawn"] is True
    assert roi_messages.decode(text) == ("roi", ROI, True)
    old = {k: v for k, v in ROI.items() if k not in ("roas", "margin_roi")}
    row = roi_messages.row(roi_messages.decode(json.dumps({"kind": "roi", **old})))
    assert row == tuple(ROI[name] if name in old else None for name in rows.ROI_DAILY.names)


@pytest.mark.parametrize(("value", "says"), [
    (b"{not json", "is not JSON"),
    (b'"roi"', "is not a JSON object: str"),
    (json.dumps({"kind": 3}).encode(), "without a kind"),
])
def test_a_malformed_roi_message_says_why(value, says):
    with pytest.raises(roi_messages.RoiMessageError, match=says):
        roi_messages.decode(value)


def test_a_roi_message_missing_a_field_or_of_no_kind_says_so():
    partial = {k: v for k, v in ROI.items() if k != "revenue"}
    message = roi_messages.decode(json.dumps(partial), default_kind=roi_messages.ROI)
    assert message.kind == "roi"
    with pytest.raises(ValueError, match="kind roi: field 'revenue' is missing"):
        roi_messages.row(message)
    with pytest.raises(ValueError, match="no kind 'daily'"):
        roi_messages.row(roi_messages.decode(json.dumps({"kind": "daily", **ROI})))
