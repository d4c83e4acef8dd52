"""Events behind the watermark but within the correction horizon correct what was reported:
after any arrival order, batching and restart, the journeys reported with every correction
applied are the batch reference's over the same events."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.events import events_of, records_of
from tests.journey_records import CAPPED, CFG, MINUTE, VISITS, Store, closed_of, key, order, touch
from udfs.journeys.book import JourneyBook
from udfs.journeys.corrections import END_OF_INPUT, CorrectingBook
from udfs.journeys.rules import closed_journeys_of
from udfs.periods import DAY_MS


class CorrectingStore(Store):
    """The engine's state: `settled`'s changes and the live watermark beside them."""

    live_watermark: int | None = None

    def restore_book(self, horizon_ms: int, config) -> CorrectingBook:
        return CorrectingBook.restore(
            config, horizon_ms, self.live_watermark, self.progress,
            pickle.loads(self.snapshot) if self.snapshot else None,
            [(k, pickle.loads(v)) for k, v in self.batches.items()],
            # the users each compaction since the snapshot changed (as the engine restores)
            [pickle.loads(v) for v in self.overlays.values()])


def reported(book_events, batch_size, slack, horizon_ms, restart_at=None, config=CFG,
             after_end=()):
    """Feed the events in arrival order, advancing to `slack` behind the newest seen; apply
    each correction to the reported multiset. With `after_end`, the input then ends (the
    final watermark) and these events come after it. Returns (reported journeys, late
    events)."""
    store = CorrectingStore()
    book = CorrectingBook(config, horizon_ms)
    shown: Counter = Counter()
    late = []
    newest = -(2**62)

    def apply(correction) -> None:
        for journey in closed_of_pair(correction.retracted):
            shown[key(journey)] -= 1
            assert shown[key(journey)] >= 0, "a correction retracted what was not reported"
        for journey in closed_of_pair(correction.added):
            shown[key(journey)] += 1

    for index, start in enumerate(range(0, len(book_events), batch_size)):
        batch = book_events[start:start + batch_size]
        newest = max([newest, *(e.ts_ms for e in batch)])
        added = book.add(events_of(batch), -(2**63))
        late += records_of(added.late)
        store.apply(added.changes)
        apply(added.correction)
        due = book.next_due()
        if due is not None and due <= newest - slack:
            advanced = book.advance(newest - slack)
            for journey in closed_of(advanced):
                shown[key(journey)] += 1
            store.apply(advanced.changes)
            store.live_watermark = book.watermark
        if restart_at == index:
            book = store.restore_book(horizon_ms, config)
    for journey in closed_of(book.advance(END_OF_INPUT if after_end else 2**62)):
        shown[key(journey)] += 1
    for start in range(0, len(after_end), batch_size):
        added = book.add(events_of(after_end[start:start + batch_size]), END_OF_INPUT)
        late += records_of(added.late)
        store.apply(added.changes)
        apply(added.correction)
    return +shown, late


def closed_of_pair(closed):
    return [*closed.converted_objects(), *closed.lapsed_objects()]


def expected_of(events, config) -> Counter:
    out: Counter = Counter()
    for user in {e.user_id for e in events}:
        out.update(map(key, closed_journeys_of([e for e in events if e.user_id == user],
                                               config)))
    return out


@st.composite
def shuffled(draw):
    """Users' events in an arrival order far from time order (up to 20 days early or
    late), as unkeyed partitions read at different speeds would give."""
    rng = random.Random(draw(st.integers(0, 10**6)))
    events = []
    for u in range(draw(st.integers(1, 10))):
        at = rng.randrange(0, 100 * DAY_MS)
        for i in range(rng.randint(1, 8)):
            at += rng.choice([0, 1, 20 * MINUTE, DAY_MS, 10 * DAY_MS, 30 * DAY_MS, 30 * DAY_MS + 1,
                              31 * DAY_MS, 120 * DAY_MS])
            if rng.random() < 0.3:
                events.append(order(f"u{u}", at, f"o{u}-{i}"))
            else:
                events.append(touch(f"u{u}", at, rng.choice("abc")))
    events.sort(key=lambda e: e.ts_ms + rng.randrange(0, 20 * DAY_MS))
    return [e._replace(span_id=str(i)) for i, e in enumerate(events)]


@settings(max_examples=200, deadline=None)
@given(events=shuffled(), batch_size=st.integers(1, 6),
       restart=st.one_of(st.none(), st.integers(0, 8)),
       config=st.sampled_from([CFG, CAPPED, VISITS]))
def test_corrections_give_the_batch_result_whatever_the_arrival_order(events, batch_size,
                                                                       restart, config):
    # the watermark one hour behind the newest event: most disorder lands behind it
    shown, late = reported(events, batch_size, 3_600_000, 40 * DAY_MS, restart, config)
    assert late == []
    assert shown == expected_of(events, config)


# users' events in the order they arrived (a case the property test found): u4 ordered on
# day 44 and again 150 days later (a winback); a restart after the 8th arrival, once a
# compaction had stored u4 in an overlay, not in the snapshot
RESTART_AFTER_AN_OVERLAY = [
    touch("u0", 2417072219, "a"),
    order("u4", 3828937662, "o4-0"),
    order("u1", 5829459334, "o1-2"),
    touch("u1", 5829459333, "b"),
    touch("u1", 5829459332, "c"),
    touch("u3", 6975150537, "a"),
    order("u1", 5829459334, "o1-3"),
    touch("u3", 7839150537, "c"),
    touch("u2", 7416254468, "c"),
    touch("u1", 8507859334, "c"),
    order("u3", 10517550537, "o3-2"),
    order("u3", 13195950537, "o3-3"),
    touch("u4", 14196937662, "b"),
    touch("u4", 16788937663, "b"),
    order("u4", 16788937663, "o4-3"),
    touch("u2", 17784254468, "c"),
    order("u2", 17784254469, "o2-2"),
    touch("u2", 20462654469, "c"),
    touch("u2", 21326654469, "b"),
    touch("u4", 27329737663, "b"),
    touch("u4", 27243337663, "c"),
    touch("u4", 27156937663, "a"),
    touch("u4", 27329737664, "a"),
]


def test_a_restart_keeps_the_users_an_overlay_holds():
    """A restore must apply the overlays stored since the snapshot: without them u4's
    first order is forgotten and its second is reported as a new customer's."""
    events = [e._replace(span_id=str(i)) for i, e in enumerate(RESTART_AFTER_AN_OVERLAY)]
    for restart in (None, 7):
        shown, late = reported(events, 1, 3_600_000, 40 * DAY_MS, restart, CFG)
        assert late == []
        assert shown == expected_of(events, CFG)
    stages = {k[2][2]: k[3] for k in shown if k[0] == "ConvertedJourney"}
    assert stages["o4-3"] == "winback"


@settings(max_examples=100, deadline=None)
@given(events=shuffled(), batch_size=st.integers(1, 6))
def test_only_events_beyond_the_horizon_are_late_and_the_rest_count(events, batch_size):
    shown, late = reported(events, batch_size, 3_600_000, 5 * DAY_MS)
    late_ids = {e.span_id for e in late}
    assert shown == expected_of([e for e in events if e.span_id not in late_ids], CFG)


@settings(max_examples=100, deadline=None)
@given(events=shuffled(), batch_size=st.integers(1, 6), cut=st.floats(0.0, 1.0))
def test_events_after_the_end_of_the_input_correct_as_just_before_it(events, batch_size,
                                                                     cut):
    """At a drain the final watermark can reach the journeys before the last events of an
    input that was idle: they correct what they change as they would have just before the
    end, and nothing is late."""
    at = int(len(events) * cut)
    shown, late = reported(events[:at], batch_size, 3_600_000, 40 * DAY_MS,
                           after_end=events[at:])
    assert late == []
    assert shown == expected_of(events, CFG)


def test_after_the_end_only_events_beyond_the_horizon_of_the_last_watermark_are_late():
    book = CorrectingBook(CFG, 10 * DAY_MS)
    book.add(events_of([touch("u", 20 * DAY_MS, "search")]), 0)
    book.advance(30 * DAY_MS)
    book.advance(END_OF_INPUT)
    added = book.add(events_of([touch("v", 21 * DAY_MS, "email"),
                                order("v", 22 * DAY_MS, "o1"),
                                touch("w", 19 * DAY_MS, "email")]), END_OF_INPUT)
    assert [e.user_id for e in records_of(added.late)] == ["w"]
    assert [(j.conversion.order_id, [t.channel for t in j.touches])
            for j in added.correction.added.converted_objects()] == [("o1", ["email"])]


def test_a_late_touch_recredits_the_conversion_it_belongs_to():
    book = CorrectingBook(CFG, 10 * DAY_MS)
    book.add(events_of([touch("u", 1_000, "search"), order("u", 5_000, "o1")]), 0)
    first = book.advance(6_000).closed.converted_objects()
    assert [[t.channel for t in j.touches] for j in first] == [["search"]]
    added = book.add(events_of([touch("u", 3_000, "email")]), 6_000)
    assert records_of(added.late) == []
    assert [[t.channel for t in j.touches]
            for j in added.correction.retracted.converted_objects()] == [["search"]]
    assert [[t.channel for t in j.touches]
            for j in added.correction.added.converted_objects()] == [["search", "email"]]


def test_a_late_order_splits_the_journey_and_changes_the_next_orders_stage():
    book = CorrectingBook(CFG, 10 * DAY_MS)
    book.add(events_of([touch("u", 1_000, "a"), touch("u", 4_000, "b"),
                        order("u", 5_000, "o2")]), 0)
    [first] = book.advance(6_000).closed.converted_objects()
    assert first.stage == "new"
    correction = book.add(events_of([order("u", 2_000, "o1")]), 6_000).correction
    added = {j.conversion.order_id: j for j in correction.added.converted_objects()}
    assert [t.channel for t in added["o1"].touches] == ["a"]
    assert [t.channel for t in added["o2"].touches] == ["b"]
    assert added["o2"].stage == "repeat" and added["o1"].stage == "new"
    assert [j.conversion.order_id for j in correction.retracted.converted_objects()] == ["o2"]


def test_an_event_at_or_behind_the_horizon_is_late():
    book = CorrectingBook(CFG, DAY_MS)
    book.add(events_of([touch("u", 10 * DAY_MS)]), 0)
    book.advance(10 * DAY_MS)
    added = book.add(events_of([touch("u", 9 * DAY_MS), touch("u", 9 * DAY_MS + 1)]), 0)
    assert [e.ts_ms for e in records_of(added.late)] == [9 * DAY_MS]


def test_without_a_horizon_it_is_the_plain_book():
    book = CorrectingBook(CFG, 0)
    assert book.live is book.settled and isinstance(book.live, JourneyBook)
    book.add(events_of([touch("u", 10)]), 0)
    book.advance(20)
    assert [e.ts_ms for e in records_of(book.add(events_of([touch("u", 15)]), 20).late)] \
        == [15]


def test_a_negative_horizon_is_refused():
    with pytest.raises(ValueError, match="horizon"):
        CorrectingBook(CFG, -1)
