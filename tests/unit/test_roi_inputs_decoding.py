"""The ROI job's input decoder (`pipelines.flink.roi.job.DecodeInputs`) on records as its
sources frame them: a row it cannot use becomes a dead letter (every job's format,
pipelines/codec/dead_letters.py) naming the topic, the partition and the offset it came
from, why, and the input's bytes (at most DEAD_LETTER_PAYLOAD_BYTES of them), and never
stops the job; good rows become items."""

from __future__ import annotations

import base64
import json

import pytest

from pipelines.codec import table_messages
from pipelines.codec.dead_letters import DEAD_LETTER_PAYLOAD_BYTES
from pipelines.codec.frame import frame
from pipelines.flink.roi.job import DEAD_LETTERS, DecodeInputs
from pipelines.flink.roi.segments import ORDER_HISTORY
from schemas.rows import CONVERSION

CREDIT = {"model": "last_click", "order_id": "o1", "touch_index": 0, "channel": "email",
          "campaign": "", "stage": "new", "credit": 1.0, "revenue": 10.0,
          "conversion_ts_ms": 1_790_000_000_000}
GPU = {"kind": "call", "gpu_uuid": "GPU-1", "interval_end_ms": 1_790_000_000_000,
       "cost_usd": 0.5, "trace_id": "ab" * 16}
SPEND = {"platform": "meta", "account": "a", "campaign": "c", "day": "2026-10-01",
         "amount": 5.0, "currency": "USD"}


def decoded(kind: str, value: bytes | None, partition: int = 2, offset: int = 41
            ) -> list[object]:
    decoder = DecodeInputs(kind, f"{kind}-topic", "USD")
    return list(decoder.process_element(frame(value, partition, offset), None))


def dead_letter(outputs: list[object]) -> dict[str, object]:
    (output,) = outputs
    assert isinstance(output, tuple) and output[0] == DEAD_LETTERS
    return json.loads(output[1])


@pytest.mark.parametrize(("kind", "value", "reason", "detail"), [
    ("credit", json.dumps({"columns": ["x"], "rows": [[1]]}).encode(), "unreadable_message",
     "unreadable row"),
    ("credit", json.dumps([{**CREDIT, "revenue": "abc"}]).encode(), "unreadable_message",
     "unreadable row"),
    ("gpu", json.dumps({**GPU, "cost_usd": "NaN"}).encode(), "unreadable_message",
     "cost_usd is not a number"),
    ("gpu", b"\xff\xfe not json", "unreadable_message", "unreadable row"),
    ("spend", json.dumps({**SPEND, "day": "2026-13-45"}).encode(), "unusable_input",
     "field 'day'"),
    ("spend", json.dumps({**SPEND, "campaign": "c\x00"}).encode(), "unusable_input",
     "control character U+0000"),
    ("spend", json.dumps({**SPEND, "currency": "EUR"}).encode(), "unusable_input",
     "reporting currency USD"),
    ("conversion", None, "unusable_input", "empty message"),
])
def test_a_row_the_job_cannot_use_is_a_dead_letter_with_its_place(kind, value, reason,
                                                                  detail):
    letter = dead_letter(decoded(kind, value, partition=2, offset=41))
    assert (letter["source"], letter["partition"], letter["offset"]) == (f"{kind}-topic", 2, 41)
    assert letter["reason"] == reason and detail in str(letter["detail"])
    assert base64.b64decode(str(letter["payload_base64"])) == (value or b"")
    assert (letter["payload_bytes"], letter["payload_truncated"]) == (len(value or b""), False)


def test_a_record_that_is_no_frame_is_a_dead_letter_too():
    decoder = DecodeInputs("spend", "spend-topic", "USD")
    letter = dead_letter(list(decoder.process_element(b"short", None)))
    assert letter["source"] == "spend-topic" and letter["reason"] == "unreadable_message"
    assert "framed record" in str(letter["detail"])
    assert base64.b64decode(str(letter["payload_base64"])) == b"short"


def test_an_oversized_input_is_a_dead_letter_of_its_first_bytes():
    """A dead letter must fit on its topic: of a message larger than the cap only the first
    DEAD_LETTER_PAYLOAD_BYTES are kept, and the letter says how large it was."""
    value = json.dumps({**SPEND, "campaign": "c" * (2 * DEAD_LETTER_PAYLOAD_BYTES),
                        "currency": "EUR"}).encode()
    letter = dead_letter(decoded("spend", value, partition=0, offset=3))
    assert letter["reason"] == "unusable_input" and letter["offset"] == 3
    assert (letter["payload_bytes"], letter["payload_truncated"]) == (len(value), True)
    assert base64.b64decode(str(letter["payload_base64"])) == \
        value[:DEAD_LETTER_PAYLOAD_BYTES]


def test_good_rows_become_items():
    (spend,) = decoded("spend", json.dumps(SPEND).encode())
    assert spend[:2] == ("spend", "2026-10-01")
    (cost,) = decoded("gpu", json.dumps(GPU).encode())
    assert cost[0] == "cost" and cost[3] == 0.5


def test_orders_go_to_the_ltv_segments_and_a_bad_one_takes_none_of_its_message():
    """With costs shared by LTV segment the conversions decoder also sends each order of a
    known user on; a message with an order whose revenue is no number is one dead letter,
    and none of its claims or orders went on before it."""
    def conversion(order: str, user: str, revenue: object) -> list[object]:
        return [order, user, 1_790_000_000_000, revenue, "USD", "new", 1, [f"t-{order}"]]

    def message(*rows: list[object]) -> bytes:
        return table_messages.encode_bytes(CONVERSION.names, list(rows))

    decoder = DecodeInputs("conversion", "conversion-topic", "USD", orders=True)
    good = list(decoder.process_element(frame(message(
        conversion("o1", "u1", 12.5), conversion("o2", "", 3.0)), 0, 7), None))
    assert [out[0] for out in good] == ["claim", "claim", ORDER_HISTORY]
    assert good[2][1] == ("order", "u1", 1_790_000_000_000,
                          ("o1", 1_790_000_000_000, 12.5))
    bad = list(decoder.process_element(frame(message(
        conversion("o3", "u1", 4.0), conversion("o4", "u2", float("nan"))), 0, 8), None))
    letter = dead_letter(bad)
    assert letter["offset"] == 8 and letter["reason"] == "unreadable_message"
    assert "o4: revenue is not a number" in str(letter["detail"])
