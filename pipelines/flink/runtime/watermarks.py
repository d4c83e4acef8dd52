"""Event time as the jobs' operators see it."""

from __future__ import annotations

# Flink's largest watermark (Long.MAX_VALUE): an input's last, at the end of a bounded run
# or a drained stop; a watermark at MAX_WATERMARK - 1 or above means none comes any more
MAX_WATERMARK = 2**63 - 1
