"""The batch reference the stream is checked against: the same udfs, run in one process."""

from __future__ import annotations

from collections import defaultdict

from pipelines.generator import Plan, valid_events
from schemas.records import Conversion, Credit, Touchpoint
from udfs.attribution import credit_journey
from udfs.journeys import ConvertedJourney, JourneyConfig, journeys_of


def reference_journeys(plan: Plan) -> list[ConvertedJourney]:
    """Every converted journey of the plan's valid events (not broken, not emitted late)."""
    by_user: dict[str, list[Touchpoint | Conversion]] = defaultdict(list)
    for e in valid_events(plan):
        ms = e.ts_ns // 10**6
        by_user[e.user_id].append(
            Touchpoint(e.user_id, ms, e.channel, e.campaign, "", "") if e.kind == "touchpoint"
            else Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency, "", ""))
    return [journey for events in by_user.values()
            for journey in journeys_of(events, JourneyConfig())]


def reference_credits(plan: Plan, models: tuple[str, ...] = ("last_click", "linear")
                      ) -> list[Credit]:
    return [c for journey in reference_journeys(plan) for c in credit_journey(journey, models)]
