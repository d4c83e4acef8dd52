"""The data-driven models' two operators, with in-memory stand-ins for Flink's keyed state
that pickle what they store, as Flink does (tests.flink_fakes): the fit (one key: counts
per path, a refit per period) and the crediting (per bucket: the converted journeys,
credited with the weights the fit sends back). Stopping and restoring between refits,
weights that overtake their journeys, or state an earlier version kept (counts as one
value, journeys in the fit) must give the credits of one uninterrupted run."""

from __future__ import annotations

import copy
import pickle
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.codec import credit_messages, table_messages
from pipelines.codec.journey_wire import period_from_wire, periods_to_wire
from pipelines.flink.attribution.credit import CreditDataDriven
from pipelines.flink.attribution.fit import FINAL, FitDataDrivenModels
from schemas.records import Conversion, Touchpoint
from tests.flink_fakes import Harness, KeyState, Named, StateStore, Timers
from udfs.attribution import merged_period, split_runs, weights_for
from udfs.attribution.data_driven import (
    PathCounts,
    conversion_credit_rows,
    period_end,
    period_runs,
    runs_periods,
)
from udfs.attribution.models import ModelParams
from udfs.journeys.book import bucket_of
from udfs.journeys.rules import ClosedJourney, ConvertedJourney, NonConvertingJourney

PERIOD_MS = 3_600_000
MODELS = ("shapley", "markov")
BUCKETS = 3


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


def user_of(journey: ClosedJourney) -> str:
    return journey.conversion.user_id if isinstance(journey, ConvertedJourney) \
        else journey.user_id


@dataclass
class Backend:
    """The two operators' state (and what the journeys operator keeps of them: each
    bucket's last message number), as a checkpoint holds it."""

    fit: KeyState = field(default_factory=KeyState)
    credit: StateStore = field(default_factory=StateStore)
    sent: dict[int, int] = field(default_factory=dict)
    timers: Timers = field(default_factory=Timers)


class TwoPhase:
    """The fit and the crediting over `backend`, fed as the journeys operator feeds them:
    a step's closed journeys split by bucket, each bucket's converted journeys to its
    crediting and its counts to the fit; the fit's weights to the bucket they name. With
    `overtake`, the journeys reach the crediting only after the weights of the next
    settling (the two inputs have no order between them)."""

    def __init__(self, backend: Backend, horizon_ms: int = 0, overtake: bool = False) -> None:
        self.backend = backend
        self.fit = Harness(FitDataDrivenModels(MODELS, ModelParams(), horizon_ms=horizon_ms,
                                               buckets=BUCKETS), backend.fit, backend.timers)
        self.credit = Harness(CreditDataDriven(horizon_ms), backend.credit, Timers())
        self.overtake = overtake
        self.held: list[Any] = []  # journeys on their way to the crediting
        self.messages = 0

    def send(self, journeys: list[ClosedJourney]) -> list[bytes]:
        out = []
        for bucket in range(BUCKETS):
            mine = [j for j in journeys if bucket_of(user_of(j), BUCKETS) == bucket]
            if not mine:
                continue
            kept, counts = split_runs(period_runs(wire_of(mine)))
            seq = self.backend.sent.get(bucket, 0)
            if kept[0]:
                seq = self.backend.sent[bucket] = seq + 1
                self.held.append((bucket, seq, "n", kept[0], pickle.dumps(kept)))
                if not self.overtake:
                    out += self.flush()
            out += self.weights(self.fit.process((bucket, seq, counts, [])))
            self.messages += 1
        return out

    def weights(self, fitted: list[Any]) -> list[bytes]:
        return [message for weights in fitted
                for message in self.credit.process_input(2, weights, weights[0])]

    def settle(self, watermark: int) -> list[bytes]:
        timers = self.backend.timers
        timers.watermark = max(timers.watermark, watermark)
        out = []
        for timestamp, key in timers.due():
            timers.registered.discard((timestamp, key))
            out += self.weights(self.fit.on_timer(timestamp, key))
        return out + self.flush()

    def flush(self) -> list[bytes]:
        """The journeys on their way reach the crediting."""
        held, self.held = self.held, []
        return [message for journeys in held
                for message in self.credit.process_input(1, journeys, journeys[0])]


def run(pipeline: TwoPhase, periods: list[list[ClosedJourney]],
        settle: bool = True) -> list[bytes]:
    """Each period's journeys in two steps, then (with `settle`) the watermark moved to
    the period's end."""
    out: list[bytes] = []
    for journeys in periods:
        half = len(journeys) // 2
        for part in (journeys[:half], journeys[half:]):
            out += pipeline.send(part)
        if settle:
            out += pipeline.settle(wire_of(journeys)[0][0])
    return out


def settle_all(pipeline: TwoPhase) -> list[bytes]:
    """The watermark moved past every pending period."""
    return pipeline.settle(pipeline.backend.timers.latest())


def credited(outputs: list[Any]) -> dict[tuple[str, str, int], float]:
    """The credits that hold after these messages: (model, order, touch) -> credit."""
    rows = credit_messages.latest(table_messages.unkeyed(out) for out in outputs)
    return {(row["model"], row["order_id"], row["touch_index"]): row["credit"]
            for row in rows}


def reference(periods: list[list[ClosedJourney]]) -> dict[tuple[str, str, int], float]:
    """One fit over every journey, period by period, crediting every conversion there
    (what the fit did alone before the two phases)."""
    counts, out = PathCounts(), []
    for journeys in periods:
        for _, converted, unconverted in wire_of(journeys):
            for message in credit_messages.encode_chunks_bytes(conversion_credit_rows(
                    counts, converted, unconverted, MODELS, ModelParams())):
                out.append(table_messages.keyed(("data-driven",), message))
    return credited(out)


def test_the_two_phases_give_the_credits_of_one_fit_over_every_journey():
    periods = closed_journeys(3, 8)
    out = run(TwoPhase(Backend()), periods)
    assert len(credited(out)) > 300
    expected = reference(periods)
    got = credited(out)
    assert got.keys() == expected.keys()
    assert all(np.isclose(got[k], expected[k], rtol=1e-12) for k in expected)


def test_weights_that_overtake_their_journeys_wait_for_them():
    periods = closed_journeys(7, 6)
    whole = run(TwoPhase(Backend()), periods)
    pipeline = TwoPhase(Backend(), overtake=True)
    out = run(pipeline, periods)
    assert credited(out) == credited(whole)
    assert out != whole  # the same credits, but some sent later (their weights waited)


def test_a_restore_between_refits_gives_the_credits_of_an_uninterrupted_run():
    periods = closed_journeys(3, 8)
    whole = run(TwoPhase(Backend()), periods)
    assert len(whole) >= 8  # every period credits some conversions

    backend = Backend()
    first = run(TwoPhase(backend), periods[:5])
    checkpoint = copy.deepcopy(backend)
    rest = run(TwoPhase(checkpoint), periods[5:])
    assert first + rest == whole
    # one entry per distinct path, in first-seen order
    stored = sorted(checkpoint.fit.states["path-cells"].values())
    assert [row for row, *_ in stored] == list(range(len(stored)))


def test_counts_stored_as_one_value_by_an_earlier_version_move_into_the_map():
    periods = closed_journeys(5, 6)
    whole = run(TwoPhase(Backend()), periods)

    backend = Backend()
    before = TwoPhase(backend)
    first = run(before, periods[:3])
    legacy = copy.deepcopy(backend)
    legacy.fit = KeyState()
    counts = before.fit.function.path_counts
    assert counts is not None
    legacy.fit.get_state(Named("path-counts")).update(counts.counts)
    rest = run(TwoPhase(legacy), periods[3:])
    assert first + rest == whole
    assert legacy.fit.states["path-counts"].value() is None
    stored = sorted(legacy.fit.states["path-cells"].values())
    moved = {path: [conversions, non] for _, path, conversions, non in stored}
    assert set(counts.counts) <= set(moved)


def test_periods_pending_at_a_restore_are_settled_as_if_uninterrupted():
    periods = closed_journeys(11, 7)
    whole = run(TwoPhase(Backend()), periods)

    backend = Backend()
    first = run(TwoPhase(backend), periods[:4])
    pending = TwoPhase(backend)
    run(pending, periods[4:], settle=False)  # three periods pending
    assert len(backend.fit.states["pending-periods"].stored) == pending.messages
    rest = settle_all(TwoPhase(copy.deepcopy(backend)))
    # the same credits (in fewer messages: one settling credits the three periods)
    assert credited(first + rest) == credited(whole)
    assert len(rest) < len(whole) - len(first)


def legacy_fit(periods: list[list[ClosedJourney]], store: Any) -> tuple[list[bytes], Backend]:
    """The credits of the first two periods, and the state with every later period's
    journeys stored in the fit (`store(pending, number, journeys)`), as an earlier
    version kept them, and their timers."""
    backend = Backend()
    first = run(TwoPhase(backend), periods[:2])
    legacy = copy.deepcopy(backend)
    for number, journeys in enumerate(periods[2:]):
        store(legacy.fit, 100 + number, journeys)
        for end in {period[0] for period in legacy_wire_of(journeys)}:
            legacy.timers.register(end)
    return first, legacy


def test_periods_pending_in_the_list_an_earlier_version_kept_go_to_their_buckets():
    periods = closed_journeys(13, 5)
    whole = run(TwoPhase(Backend()), periods)

    def in_a_list(fit: KeyState, number: int, journeys: list[ClosedJourney]) -> None:
        for part in (journeys[:len(journeys) // 2], journeys[len(journeys) // 2:]):
            for period in legacy_wire_of(part):
                fit.get_list_state(Named("closed-journeys")).add(period)

    first, legacy = legacy_fit(periods, in_a_list)
    rest = settle_all(TwoPhase(legacy))
    assert credited(first + rest) == credited(whole)
    assert list(legacy.fit.states["closed-journeys"].get()) == []
    assert legacy.fit.states["pending-periods"].stored == {}


def test_pending_entries_in_the_forms_an_earlier_version_stored_go_to_their_buckets():
    periods = closed_journeys(17, 5)
    whole = run(TwoPhase(Backend()), periods)

    def per_period(fit: KeyState, number: int, journeys: list[ClosedJourney]) -> None:
        for at, period in enumerate(legacy_wire_of(journeys)):
            fit.get_map_state(Named("pending-periods")).put_all(
                {f"{period[0]}:{number * 10 + at}": period})

    def as_runs(fit: KeyState, number: int, journeys: list[ClosedJourney]) -> None:
        periods = wire_of(journeys)
        ends = ",".join(str(period[0]) for period in periods)
        fit.get_map_state(Named("pending-periods")).put_all(
            {f"n{number}:{ends}": pickle.dumps(period_runs(periods))})

    for form in (per_period, as_runs):
        first, legacy = legacy_fit(periods, form)
        pipeline = TwoPhase(legacy)
        rest = settle_all(pipeline)
        assert credited(first + rest) == credited(whole), form.__name__
        assert legacy.fit.states["pending-periods"].stored == {}
        assert not any(key.startswith(("n", "k")) for store in legacy.credit.by_key.values()
                       for key in store.states["closed-conversions"].stored), form.__name__


def test_settled_periods_an_earlier_version_kept_are_credited_again_by_their_buckets():
    """With a horizon the fit kept each settled period's converted journeys, to credit
    them again should a correction come; now each bucket keeps its own. Journeys after
    the final watermark settle the last period again: the credits of the period's
    journeys the earlier version kept come again, from their buckets."""
    horizon = 2 * PERIOD_MS
    periods = closed_journeys(9, 5)
    last = periods[-1]
    whole = run(TwoPhase(Backend(), horizon), periods)
    backend = Backend()
    first = run(TwoPhase(backend, horizon), [*periods[:-1], last[:20]])
    settled = backend.fit.states["settled-periods"]
    end = max(settled.stored)
    journeys = [period for period in wire_of(last[:20]) if period[0] == end]
    # as the earlier version kept the period: its journeys, in the fit; none in the buckets
    settled.put(end, pickle.dumps((journeys[0][1], journeys[0][2])))
    for store in backend.credit.by_key.values():
        kept = store.states["closed-conversions"]
        for key in [key for key in kept.stored if str(end) in key.split(":")[1]]:
            kept.remove(key)
    backend.timers.watermark = FINAL
    again = TwoPhase(backend, horizon)
    rest = again.send(last[20:])
    assert credited(first + rest) == credited(whole)
    moved = [key for store in backend.credit.by_key.values()
             for key in store.states["closed-conversions"].stored]
    assert any(key.startswith("s") and str(end) in key for key in moved)  # credited again


def test_journeys_that_come_after_the_final_watermark_are_credited_at_once():
    """At a drain, an attribution subtask whose output was idle is left out of the fit's
    watermark: the final watermark can pass before that subtask's last journeys come, and
    no timer fires after it. They are settled as they come, with the credits they would
    have had before it (the period settled again, as a correction settles it)."""
    horizon = 2 * PERIOD_MS
    periods = closed_journeys(9, 5)
    whole = run(TwoPhase(Backend(), horizon), periods)

    backend = Backend()
    pipeline = TwoPhase(backend, horizon)
    out = run(pipeline, periods[:-1])
    last = periods[-1]
    out += pipeline.send(last[:20])
    out += pipeline.settle(FINAL)
    before = credited(out)
    late = pipeline.send(last[20:])
    assert late, "journeys after the final watermark must be credited"
    assert credited(out + late) == credited(whole) != before
    assert not backend.timers.due(), "no timer is left waiting for a watermark that cannot come"


def test_a_buckets_weights_are_the_whole_fits_for_its_paths():
    counts = PathCounts()
    for journeys in closed_journeys(4, 3):
        for _, converted, unconverted in wire_of(journeys):
            conversion_credit_rows(counts, converted, unconverted, MODELS, ModelParams())
    fitted = counts.fit(MODELS, ModelParams())
    converted, _ = merged_period([(period[1], {}, 1) for period in
                                  wire_of(closed_journeys(4, 3)[2])])
    chosen = weights_for(fitted, dict.fromkeys([tuple(t.channel for t in j.touches)
                                                for j in closed_journeys(4, 3)[2]
                                                if isinstance(j, ConvertedJourney)], 1.0))
    assert len(chosen.rows) < len(fitted.rows)
    assert chosen.credit_rows(converted) == fitted.credit_rows(converted)


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
