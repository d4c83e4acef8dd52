"""The dead-letter topics' messages: what could not be used, why, and where it came from."""

from __future__ import annotations

import base64
import json
from typing import Any

from schemas.records import DeadLetter

# A dead letter must always fit on the dead-letter topic: with a broker's default record
# limit (1 MiB) a whole oversized message, in base64, would not, and the sink's failure
# would stop the job. Bytes past this many are cut (the message says so, and how large the
# original was; its partition and offset find it on the source topic).
DEAD_LETTER_PAYLOAD_BYTES = 256 * 1024
DEAD_LETTER_DETAIL_CHARS = 2000


def dead_letter_json(letter: DeadLetter, source: str, partition: int | None = None,
                     offset: int | None = None,
                     max_payload_bytes: int = DEAD_LETTER_PAYLOAD_BYTES) -> str:
    """The dead-letter topic's message: reason, detail, where it came from and the original
    bytes (base64), at most `max_payload_bytes` of them (`payload_truncated` says so)."""
    payload = letter.payload
    detail = letter.detail
    if len(detail) > DEAD_LETTER_DETAIL_CHARS:
        detail = detail[:DEAD_LETTER_DETAIL_CHARS] + f"... ({len(letter.detail)} characters)"
    row: dict[str, Any] = {"reason": letter.reason, "detail": detail, "source": source}
    if partition is not None:
        row["partition"], row["offset"] = partition, offset
    row["payload_bytes"] = len(payload)
    row["payload_truncated"] = len(payload) > max_payload_bytes
    row["payload_base64"] = base64.b64encode(payload[:max_payload_bytes]).decode()
    return json.dumps(row, separators=(",", ":"))



def dead_letter(source: str, reason: str, detail: str, payload: bytes | None,
                partition: int | None = None, offset: int | None = None,
                max_payload_bytes: int = DEAD_LETTER_PAYLOAD_BYTES) -> str:
    """`dead_letter_json` of a DeadLetter made here: `reason` a short word for what went
    wrong (`unreadable_message`, ...), `detail` the sentence that says it, `payload` the
    input as it came (None: none)."""
    return dead_letter_json(DeadLetter(reason, detail, bytes(payload or b"")), source,
                            partition, offset, max_payload_bytes)
