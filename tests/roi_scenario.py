"""The ROI job's hand-checked scenario: two buyers' touches and orders on one day (b a
repeat buyer), whose ROI the integration tests work out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.sources.generator import Plan
from tests.job_io import D, H, S, order, touch

T0 = int(datetime(2026, 9, 1, 6, tzinfo=UTC).timestamp()) * 10**9
DAY = "2026-09-01"

SCENARIO = Plan(events=[
    order("b", T0 - 10 * D, "oB0", 20.0),  # b's first order, no touch: b is a repeat buyer
    touch("a", T0, "email"), touch("a", T0 + 60 * S, "display"), order("a", T0 + H, "oA", 120.0),
    touch("b", T0 + 2 * H, "display"), order("b", T0 + 3 * H, "oB", 60.0),
])
