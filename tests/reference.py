"""The batch reference the stream is checked against: the same udfs, run in one process;
and a plan's events as the archive stores them (`archive_plan`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from pipelines.backfill.archive import tables_by_date, write_tables
from pipelines.settings.job_config import AttributionConfig
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import Plan
from schemas.records import Conversion, Credit, Touchpoint
from udfs.attribution.credits import credit_journey
from udfs.attribution.data_driven import credit_by_period
from udfs.attribution.models import DATA_DRIVEN_MODELS, PER_CONVERSION_MODELS
from udfs.journeys.rules import ClosedJourney, ConvertedJourney, JourneyConfig, closed_journeys_of
from udfs.periods import DAY_MS

# the correction horizon the integration tests' job configs set (tests/integration/
# conftest.py): longer than any test plan (45 days), so every held-back event corrects,
# whatever the partitioning (a horizon's edge is judged per partition). None: every
# held-back event late, as without corrections
TEST_HORIZON_DAYS = 60
TEST_HORIZON_MS = int(TEST_HORIZON_DAYS * DAY_MS)


def reference_closed_journeys(plan: Plan, correction_ms: int | None = TEST_HORIZON_MS
                              ) -> list[ClosedJourney]:
    """Every journey (converting or not) of the plan's valid events (not broken, not late;
    with a correction horizon, the held-back events it corrects with too), closed as a
    stream run to its end closes them."""
    by_user: dict[str, list[Touchpoint | Conversion]] = defaultdict(list)
    for e in valid_events(plan, correction_ms):
        ms = e.ts_ns // 10**6
        by_user[e.user_id].append(
            Touchpoint(e.user_id, ms, e.channel, e.campaign, "", "") if e.kind == "touchpoint"
            else Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency, "", ""))
    return [journey for events in by_user.values()
            for journey in closed_journeys_of(events, JourneyConfig())]


def reference_journeys(plan: Plan, correction_ms: int | None = TEST_HORIZON_MS
                       ) -> list[ConvertedJourney]:
    return [j for j in reference_closed_journeys(plan, correction_ms)
            if isinstance(j, ConvertedJourney)]


def reference_credits(plan: Plan, models: tuple[str, ...] = AttributionConfig.models,
                      refit_every_s: float = AttributionConfig.refit_every_s,
                      correction_ms: int | None = TEST_HORIZON_MS) -> list[Credit]:
    closed = reference_closed_journeys(plan, correction_ms)
    per_conversion = tuple(m for m in models if m in PER_CONVERSION_MODELS)
    data_driven = tuple(m for m in models if m in DATA_DRIVEN_MODELS)
    credits = [c for j in closed if isinstance(j, ConvertedJourney)
               for c in credit_journey(j, per_conversion)]
    if data_driven:
        credits += credit_by_period(closed, data_driven, int(refit_every_s * 1000))
    return credits


def archive_plan(plan: Plan, root: Path) -> None:
    """The plan's events a stream counts (those held back to the end too: the tests'
    horizon covers them) as the archiver would store them."""
    records: list[Touchpoint | Conversion] = []
    for e in valid_events(plan, TEST_HORIZON_MS):
        ms = e.ts_ns // 10**6
        records.append(Touchpoint(e.user_id, ms, e.channel, e.campaign, f"t-{e.user_id}-{ms}", "")
                       if e.kind == "touchpoint" else
                       Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency,
                                  f"c-{e.order_id}", ""))
    write_tables(root, tables_by_date(records), "plan")
