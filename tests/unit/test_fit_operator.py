"""The data-driven fit operator's state, with in-memory stand-ins for Flink's keyed state
that pickle what they store, as Flink does (tests.flink_fakes): stopping and restoring
between refits, or restoring counts an earlier version kept as one value, must give the
credits of one uninterrupted run."""

from __future__ import annotations

import copy
import pickle
import random
import struct
from typing import Any

from pipelines.codec import credit_messages, table_messages
from pipelines.codec.journey_wire import period_from_wire, periods_to_wire
from pipelines.flink.attribution.fit import FINAL, FitDataDrivenModels
from schemas.records import Conversion, Touchpoint
from tests.flink_fakes import Harness, KeyState, Named, Timers
from udfs.attribution.data_driven import period_end, period_runs, runs_periods
from udfs.attribution.models import ModelParams
from udfs.journeys.rules import ClosedJourney, ConvertedJourney, NonConvertingJourney

PERIOD_MS = 3_600_000
MODELS = ("shapley", "markov")


def closed_journeys(seed: int, periods: int) -> list[list[ClosedJourney]]:
    """Journeys over `periods` refit periods, new channels appearing as time goes on."""
    rng = random.Random(seed)
    out = []
    for period in range(periods):
        channels = ["search", "social", "email", "display", "affiliate"][:2 + period % 4]
        journeys: list[ClosedJourney] = []
        for n in range(60):
            close = period * PERIOD_MS + rng.randrange(PERIOD_MS)
            user = f"u{period}-{n}"
            touches = tuple(Touchpoint(user, close - 1000 * (k + 1), rng.choice(channels),
                                       "", "", "") for k in range(rng.randrange(0, 5)))[::-1]
            if rng.random() < 0.4:
                order = Conversion(user, close, f"o{period}-{n}", 10.0 + n, "USD", "", "")
                journeys.append(ConvertedJourney(order, touches, "new"))
            else:
                journeys.append(NonConvertingJourney(user, touches, close))
        out.append(journeys)
    return out


def legacy_wire_of(journeys: list[ClosedJourney]) -> list[Any]:
    """The periods as earlier versions sent and stored them."""
    return periods_to_wire(journeys, lambda ts: period_end(ts, PERIOD_MS))


def wire_of(journeys: list[ClosedJourney]) -> list[Any]:
    return [period_from_wire(period) for period in legacy_wire_of(journeys)]


def run(operator: FitDataDrivenModels, backend: KeyState, periods: list[list[ClosedJourney]],
        timers: Timers, settle: bool = True) -> list[str]:
    """Each period's journeys in two arrivals, then (with `settle`) the watermark moved
    to the period's end."""
    harness = Harness(operator, backend, timers)
    out: list[str] = []
    for journeys in periods:
        half = len(journeys) // 2
        for part in (journeys[:half], journeys[half:]):
            harness.process(pickle.dumps(wire_of(part)))
        if settle:
            end = wire_of(journeys)[0][0]
            timers.watermark = end
            out += harness.on_timer(end)
    return out


def settle_all(operator: FitDataDrivenModels, backend: KeyState, timers: Timers) -> list[str]:
    """A restored operator, the watermark moved past every pending period."""
    harness = Harness(operator, backend, timers)
    timers.watermark = timers.latest()
    return harness.on_timer(timers.watermark)


def operator() -> FitDataDrivenModels:
    return FitDataDrivenModels(MODELS, ModelParams())


def test_a_restore_between_refits_gives_the_credits_of_an_uninterrupted_run():
    periods = closed_journeys(3, 8)
    whole = run(operator(), KeyState(), periods, Timers())
    assert len(whole) >= 8  # every period credits some conversions

    backend, timers = KeyState(), Timers()
    first = run(operator(), backend, periods[:5], timers)
    checkpoint = copy.deepcopy(backend)
    rest = run(operator(), checkpoint, periods[5:], timers)
    assert first + rest == whole
    # one entry per distinct path, in first-seen order
    stored = sorted(checkpoint.states["path-cells"].values())
    assert [row for row, *_ in stored] == list(range(len(stored)))


def test_counts_stored_as_one_value_by_an_earlier_version_move_into_the_map():
    periods = closed_journeys(5, 6)
    whole = run(operator(), KeyState(), periods, Timers())

    before, timers = operator(), Timers()
    first = run(before, KeyState(), periods[:3], timers)
    legacy = KeyState()
    assert before.path_counts is not None
    legacy.get_state(Named("path-counts")).update(before.path_counts.counts)
    rest = run(operator(), legacy, periods[3:], timers)
    assert first + rest == whole
    assert legacy.states["path-counts"].value() is None
    stored = sorted(legacy.states["path-cells"].values())
    moved = {path: [conversions, non] for _, path, conversions, non in stored}
    assert set(before.path_counts.counts) <= set(moved)


def test_periods_pending_at_a_restore_are_settled_as_if_uninterrupted():
    periods = closed_journeys(11, 7)
    whole = run(operator(), KeyState(), periods, Timers())

    backend, timers = KeyState(), Timers()
    first = run(operator(), backend, periods[:4], timers)
    run(operator(), backend, periods[4:], timers, settle=False)  # three periods pending
    assert len(backend.states["pending-periods"].stored) == 6
    rest = settle_all(operator(), copy.deepcopy(backend), timers)
    assert first + rest == whole


def test_periods_pending_in_the_list_an_earlier_version_kept_move_into_the_map():
    periods = closed_journeys(13, 5)
    whole = run(operator(), KeyState(), periods, Timers())

    backend, timers = KeyState(), Timers()
    first = run(operator(), backend, periods[:2], timers)
    legacy = copy.deepcopy(backend)
    for journeys in periods[2:]:  # as the earlier version stored them: one list entry each
        for part in (journeys[:len(journeys) // 2], journeys[len(journeys) // 2:]):
            for period in legacy_wire_of(part):
                legacy.get_list_state(Named("closed-journeys")).add(period)
                timers.register(period[0])
    rest = settle_all(operator(), legacy, timers)
    assert first + rest == whole
    assert legacy.states["closed-journeys"].get() == []
    assert legacy.states["pending-periods"].stored == {}


def test_pending_entries_in_the_form_an_earlier_version_stored_are_settled_the_same():
    periods = closed_journeys(17, 5)
    whole = run(operator(), KeyState(), periods, Timers())

    backend, timers = KeyState(), Timers()
    first = run(operator(), backend, periods[:2], timers)
    legacy = copy.deepcopy(backend)
    pending = legacy.get_map_state(Named("pending-periods"))
    for number, journeys in enumerate(periods[2:]):
        for period in legacy_wire_of(journeys):
            pending.put_all({f"{period[0]}:{number}": period})
            timers.register(period[0])
    rest = settle_all(operator(), legacy, timers)
    assert first + rest == whole
    assert pending.stored == {}


def credited(outputs: list[Any]) -> dict[tuple[str, str, int], float]:
    """The credits that hold after the fit's messages: (model, order, touch) -> credit."""
    rows = credit_messages.latest(table_messages.unkeyed(out) for out in outputs)
    return {(row["model"], row["order_id"], row["touch_index"]): row["credit"]
            for row in rows}


def test_journeys_that_come_after_the_final_watermark_are_credited_at_once():
    """At a drain, an attribution subtask whose output was idle is left out of the fit's
    watermark: the final watermark can pass before that subtask's last journeys come, and
    no timer fires after it. They are settled as they come, with the credits they would
    have had before it (the period settled again, as a correction settles it)."""
    def correcting() -> FitDataDrivenModels:
        return FitDataDrivenModels(MODELS, ModelParams(), horizon_ms=2 * PERIOD_MS)

    periods = closed_journeys(9, 5)
    whole = run(correcting(), KeyState(), periods, Timers())

    backend, timers = KeyState(), Timers()
    harness = Harness(correcting(), backend, timers)
    out = run(harness.function, backend, periods[:-1], timers)
    last = periods[-1]
    out += harness.process(pickle.dumps(wire_of(last[:20])))
    timers.watermark = FINAL
    for timestamp, key in timers.due():
        timers.registered.discard((timestamp, key))
        out += harness.on_timer(timestamp, key)
    before = credited(out)
    late = harness.process(pickle.dumps(wire_of(last[20:])))
    assert late, "journeys after the final watermark must be credited"
    assert credited(out + late) == credited(whole) != before
    assert not timers.due(), "no timer is left waiting for a watermark that cannot come"


def run_arrivals(periods: list[list[ClosedJourney]], message: Any,
                 restore_after: int | None = None) -> tuple[list[str], list[list[str]]]:
    """The journeys in arrivals of 90, each spanning up to three periods, each followed by
    the watermark at the end of the period before its newest one (so an arrival's last
    period waits while its earlier ones settle); with `restore_after`, a new operator
    over a copy of the state after that many arrivals. Also the pending keys after each."""
    journeys = [journey for period in periods for journey in period]
    backend, timers = KeyState(), Timers()
    harness = Harness(operator(), backend, timers)
    out: list[str] = []
    keys: list[list[str]] = []
    for number, start in enumerate(range(0, len(journeys), 90)):
        arrival = wire_of(journeys[start:start + 90])
        out += harness.process(message(arrival))
        timers.watermark = max(timers.watermark, arrival[-1][0] - PERIOD_MS)
        for timestamp, key in timers.due():
            timers.registered.discard((timestamp, key))
            out += harness.on_timer(timestamp, key)
        keys.append(sorted(backend.states["pending-periods"].stored))
        if number + 1 == restore_after:
            backend = copy.deepcopy(backend)
            harness = Harness(operator(), backend, timers)
    return out + settle_all(harness.function, backend, timers), keys


def test_a_step_of_several_periods_is_stored_once_and_settled_period_by_period():
    """A journeys step sends all the periods it closed journeys in as one message, which
    the fit stores as it came (one entry per arrival, not a pickle per period): the
    credits equal those of the per-period entries, with and without a restore between a
    period of an arrival settled and its next one."""
    periods = closed_journeys(23, 6)
    per_period, _ = run_arrivals(periods, pickle.dumps)
    whole, keys = run_arrivals(periods, as_runs)
    assert credited(whole) == credited(per_period)
    assert len(credited(whole)) > 100
    assert whole == per_period  # the same messages, in the same order
    # one entry per arrival waiting, named by the periods it still holds
    # (the first arrival: period 0's 60 journeys and 30 of period 1's; period 0 settled)
    assert keys[0] == [f"n0:{2 * PERIOD_MS - 1}"]
    spanning = [pending for pending in keys if any("," in key for key in pending)]
    assert not spanning, "an entry holds only periods not yet settled"
    assert all(key.startswith("n") for pending in keys for key in pending)
    for restore_after in (1, 2, 3):
        restored, _ = run_arrivals(periods, as_runs, restore_after)
        assert restored == whole
    # arrivals an earlier version stored (a list of period tables), read after a restore
    for restore_after in (1, 2):
        restored, _ = run_arrivals(periods, as_a_list_of_periods, restore_after)
        assert restored == whole


def as_runs(arrival: list[Any]) -> bytes:
    """A journeys step's message: its periods as runs of one table."""
    from pipelines.flink.attribution.support import closed_periods_message

    return closed_periods_message(period_runs(arrival))


def as_a_list_of_periods(arrival: list[Any]) -> bytes:
    """The message (and entry) of a step as earlier versions made it: a table a period."""
    from pipelines.flink.attribution.support import _CLOSED, _COUNT

    ends = [period[0] for period in arrival]
    return b"".join([_CLOSED, _COUNT.pack(len(ends)), struct.pack(f"<{len(ends)}q", *ends),
                     pickle.dumps(arrival)])


def test_runs_of_a_steps_periods_give_back_each_period() -> None:
    """closed_period_runs: one table in period order, each period a run of it holding its
    converted journeys in the order they closed, and each period's counts per path of
    the journeys that did not convert; period_runs of those periods gives them back."""
    import numpy as np

    from udfs.attribution.data_driven import closed_period_runs
    from udfs.journeys import ClosedJourneys
    from udfs.journeys.columns import JourneyTouches, LapsedJourneys, converted_columns

    journeys = [j for period in closed_journeys(5, 4) for j in period]
    shuffled = random.Random(3).sample(journeys, len(journeys))
    converted = [j for j in shuffled if isinstance(j, ConvertedJourney)]
    lapsed = [j for j in shuffled if isinstance(j, NonConvertingJourney)]
    touches = [t for j in lapsed for t in j.touches]
    offsets = np.cumsum([0, *(len(j.touches) for j in lapsed)])
    closed = ClosedJourneys(converted_columns(converted), LapsedJourneys(
        np.array([j.user_id for j in lapsed], object),
        np.array([j.close_ts_ms for j in lapsed], np.int64),
        JourneyTouches(offsets, np.array([t.ts_ms for t in touches], np.int64),
                       np.array([t.channel for t in touches], object),
                       np.array([t.campaign for t in touches], object),
                       np.array([t.trace_id for t in touches], object))))
    end_of = {j: period_end(j.conversion.ts_ms if isinstance(j, ConvertedJourney)
                            else j.close_ts_ms, PERIOD_MS) for j in shuffled}
    runs = closed_period_runs(closed, PERIOD_MS)
    assert runs[0] == sorted(set(end_of.values())) and len(runs[0]) == 4
    assert runs[1][0] == 0 and runs[1][-1] == len(runs[2]) == len(converted)
    for end, table, paths in runs_periods(runs):
        assert table.order_id.tolist() == [j.conversion.order_id for j in converted
                                           if end_of[j] == end]
        assert table.touches.channel.tolist() == [t.channel for j in converted
                                                  if end_of[j] == end for t in j.touches]
        expected: dict[tuple[str, ...], float] = {}
        for j in lapsed:
            if end_of[j] == end:
                path = tuple(t.channel for t in j.touches)
                expected[path] = expected.get(path, 0.0) + 1.0
        assert paths == expected
    again = period_runs(runs_periods(runs)[::-1])
    assert again[0] == runs[0] and again[1] == runs[1] and again[3] == runs[3]
    assert again[2].order_id.tolist() == runs[2].order_id.tolist()
