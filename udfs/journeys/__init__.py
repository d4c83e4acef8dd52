"""User journeys: the touches before each conversion, kept per user bucket as the
watermark advances (the book), corrected when late events arrive, and which events count
(arrival). What the engines and the attribution domain may use; the rest is internal.
"""

from __future__ import annotations

from udfs.journeys.arrival import (
    NO_ARRIVAL,
    arrival_bound,
    arrived_in_time,
    correction_reach_ms,
)
from udfs.journeys.book import (
    NOTHING_CLOSED,
    JourneyBook,
    Progress,
    Snapshot,
    bucket_of,
)
from udfs.journeys.columns import (
    NONE,
    ClosedJourneys,
    ConvertedJourneys,
    JourneyTouches,
    concat_converted,
    converted_columns,
    key_runs,
    paths_of,
)
from udfs.journeys.corrections import (
    CorrectingBook,
    Correction,
    converted_keys,
    settle_step_ms,
    unmatched,
)
from udfs.journeys.order_ledger import (
    OrderLedger,
)
from udfs.journeys.rules import (
    ClosedJourney,
    ConvertedJourney,
    JourneyConfig,
    JourneyState,
    close_ts,
    closed_journeys_of,
)
from udfs.journeys.state import (
    Changes,
    Overlay,
)
from udfs.journeys.table import (
    PATH_SEPARATOR,
    JourneyTable,
    apply_transform,
    from_coded_paths,
    from_flat_paths,
    from_paths,
)

__all__ = [
    "Changes",
    "Overlay",
    "ClosedJourney",
    "ClosedJourneys",
    "ConvertedJourney",
    "ConvertedJourneys",
    "CorrectingBook",
    "Correction",
    "JourneyBook",
    "JourneyConfig",
    "JourneyState",
    "JourneyTable",
    "JourneyTouches",
    "NONE",
    "NOTHING_CLOSED",
    "NO_ARRIVAL",
    "OrderLedger",
    "PATH_SEPARATOR",
    "Progress",
    "Snapshot",
    "apply_transform",
    "arrival_bound",
    "arrived_in_time",
    "bucket_of",
    "close_ts",
    "closed_journeys_of",
    "concat_converted",
    "converted_columns",
    "converted_keys",
    "correction_reach_ms",
    "from_coded_paths",
    "from_flat_paths",
    "from_paths",
    "key_runs",
    "paths_of",
    "settle_step_ms",
    "unmatched",
]
