"""A bucket of users advanced together closes the journeys each user closes on their own."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.records import Conversion, Touchpoint
from udfs.journey_book import Changes, JourneyBook, bucket_of
from udfs.journeys import (
    DAY_MS,
    ConvertedJourney,
    JourneyConfig,
    JourneyState,
    closed_journeys_of,
)

# history long enough never to run out inside the data (the batch reference never forgets)
CFG = JourneyConfig(lookback_days=30, history_days=5000, winback_days=90)


def touch(user: str, ts: int, channel: str = "email") -> Touchpoint:
    return Touchpoint(user, ts, channel, f"{channel}-c", "", "")


def order(user: str, ts: int, order_id: str) -> Conversion:
    return Conversion(user, ts, order_id, 10.0, "USD", "", "")


class Store:
    """What an engine keeps: the book's changes applied to plain dicts."""

    def __init__(self) -> None:
        self.users: dict[str, JourneyState] = {}
        self.batches: dict[int, list] = {}
        self.progress = None

    def apply(self, changes: Changes) -> None:
        self.users.update(changes.users)
        for user in changes.removed_users:
            self.users.pop(user, None)  # as a state store does, deleting nothing is fine
        self.batches.update(changes.batches)
        for batch in changes.removed_batches:
            del self.batches[batch]
        if changes.progress is not None:
            self.progress = changes.progress

    def restore(self, compact_every: int = 2) -> JourneyBook:
        return JourneyBook.restore(CFG, self.progress, self.users.items(),
                                   self.batches.items(), compact_every)


def key(journey) -> tuple:
    return (type(journey).__name__, journey.touches,
            journey.conversion if isinstance(journey, ConvertedJourney) else journey.close_ts_ms,
            getattr(journey, "stage", ""))


def run(events, batch_size: int, watermark_steps: list[int], restart_at: int | None,
        slack: int, compact_every: int = 2):
    """Feed `events` in arrival order, in batches, advancing the watermark to `slack`
    behind the newest event seen after each batch; optionally rebuild the book from the
    store mid-way (a restart). Returns (closed journeys, late events, store)."""
    store = Store()
    book = JourneyBook(CFG, compact_every)
    closed, late = [], []
    newest = -(2**62)
    for index, start in enumerate(range(0, len(events), batch_size)):
        batch = events[start:start + batch_size]
        newest = max([newest, *(e.ts_ms for e in batch)])
        bound = newest - slack
        on_time = [e for e in batch if e.ts_ms > bound]
        late += [e for e in batch if e.ts_ms <= bound]
        refused, changes = book.add(on_time, watermark=-(2**63))
        late += refused
        store.apply(changes)
        if watermark_steps[index % len(watermark_steps)]:
            due = book.next_due()
            if due is not None and due <= bound:
                advanced = book.advance(bound)
                closed += advanced.closed
                store.apply(advanced.changes)
        if restart_at == index:
            book = store.restore(compact_every)
    advanced = book.advance(2**62)  # the end of the input: everything closes
    closed += advanced.closed
    store.apply(advanced.changes)
    store.apply(book.compact())
    return closed, late, store


@st.composite
def populations(draw):
    seed = draw(st.integers(0, 10**6))
    rng = random.Random(seed)
    events = []
    for u in range(draw(st.integers(1, 12))):
        at = rng.randrange(0, 100 * DAY_MS)
        for i in range(rng.randint(1, 8)):
            at += rng.choice([0, 1, DAY_MS, 10 * DAY_MS, 31 * DAY_MS, 120 * DAY_MS])
            if rng.random() < 0.3:
                events.append(order(f"u{u}", at, f"o{u}-{i}"))
            else:
                events.append(touch(f"u{u}", at, rng.choice("abc")))
    events.sort(key=lambda e: e.ts_ms + rng.randrange(0, 3 * DAY_MS))  # some disorder
    # a distinct span id each: equal events stay distinguishable (late or not)
    return [e._replace(span_id=str(i)) for i, e in enumerate(events)]


@settings(max_examples=200, deadline=None)
@given(events=populations(), batch_size=st.integers(1, 7),
       watermark_steps=st.lists(st.booleans(), min_size=1, max_size=4),
       restart=st.one_of(st.none(), st.integers(0, 8)), compact_every=st.integers(1, 4))
def test_closes_what_each_user_closes_alone_whatever_the_batching(events, batch_size,
                                                                   watermark_steps, restart,
                                                                   compact_every):
    closed, late, store = run(events, batch_size, watermark_steps, restart, slack=5 * DAY_MS,
                              compact_every=compact_every)
    on_time = [e for e in events if e not in late]
    expected = []
    for user in {e.user_id for e in on_time}:
        expected += closed_journeys_of([e for e in on_time if e.user_id == user], CFG)
    assert sorted(map(key, closed)) == sorted(map(key, expected))
    # at the end of time nothing waits and nobody is remembered
    assert store.users == {} and store.batches == {}


def test_late_events_are_refused_and_nothing_is_lost():
    book = JourneyBook(CFG)
    book.add([touch("u", 100), touch("u", 300)], watermark=0)
    book.advance(200)
    late, _ = book.add([touch("u", 150), touch("u", 250)], watermark=120)
    assert late == [touch("u", 150)]  # behind the book's own watermark (200)
    (journey,) = book.advance(10**15).closed
    assert [t.ts_ms for t in journey.touches] == [100, 250, 300]


def test_a_restored_book_remembers_its_watermark():
    store = Store()
    book = JourneyBook(CFG, compact_every=10)
    store.apply(book.add([touch("u", 100)], watermark=0)[1])
    store.apply(book.advance(500).changes)
    restored = store.restore(compact_every=10)
    late, _ = restored.add([touch("u", 400), touch("u", 600)], watermark=-(2**63))
    assert late == [touch("u", 400)]


def test_next_due_is_the_earliest_waiting_event_or_wake_up():
    book = JourneyBook(CFG)
    assert book.next_due() is None
    book.add([touch("u", 5 * DAY_MS), order("v", 2 * DAY_MS, "o")], watermark=0)
    assert book.next_due() == 2 * DAY_MS
    book.advance(3 * DAY_MS)
    assert book.next_due() == 5 * DAY_MS  # the touch still waits
    book.advance(5 * DAY_MS)
    # v's order history runs out, u's touch could close unconverted: the earlier one
    assert book.next_due() == 5 * DAY_MS + CFG.lookback_ms + 1


def test_a_busy_users_wake_up_moves_with_their_touches_and_fires_on_time():
    book = JourneyBook(CFG)
    # a touch a day for 40 days: the open journey can close only 30 days after the last
    last = 0
    for day in range(40):
        last = day * DAY_MS + 1
        book.add([touch("u", last)], watermark=-1)
        assert book.advance(last).closed == []
    # one queued wake-up for the user, moved on when it comes due, not one per touch
    assert len(book._wake_due) == 1
    assert book.next_due() == last + CFG.lookback_ms + 1
    assert book.advance(last + CFG.lookback_ms).closed == []
    closed = book.advance(last + CFG.lookback_ms + 1).closed
    assert [(type(j).__name__, len(j.touches), j.close_ts_ms) for j in closed] == [
        ("NonConvertingJourney", 31, last + CFG.lookback_ms + 1)]
    assert book.next_due() is None


def test_a_wake_up_moved_earlier_fires_at_the_earlier_time():
    short = JourneyConfig(lookback_days=30, history_days=100, winback_days=90)
    book = JourneyBook(short)
    book.add([order("u", DAY_MS, "o")], watermark=-1)
    book.advance(DAY_MS)
    assert book.next_due() == DAY_MS + short.history_ms + 1  # the order history
    book.add([touch("u", 2 * DAY_MS)], watermark=-1)
    book.advance(2 * DAY_MS)
    assert book.next_due() == 2 * DAY_MS + short.lookback_ms + 1  # now the open touch
    closed = book.advance(2 * DAY_MS + short.lookback_ms + 1).closed
    assert [j.close_ts_ms for j in closed] == [2 * DAY_MS + short.lookback_ms + 1]
    assert book.next_due() == DAY_MS + short.history_ms + 1
    book.advance(DAY_MS + short.history_ms + 1)
    assert book.users == {} and book.next_due() is None


def test_buckets_are_stable_and_spread():
    assert bucket_of("user-000001", 32) == bucket_of("user-000001", 32)
    counts = [0] * 8
    for i in range(8000):
        counts[bucket_of(f"user-{i:06d}", 8)] += 1
    assert min(counts) > 800


def test_changed_users_are_written_once_per_compaction():
    book = JourneyBook(CFG, compact_every=4)
    written = []
    for i in range(8):
        book.add([touch("u", 10 * i + 5), touch("v", 10 * i + 6)], watermark=-1)
        changes = book.advance(10 * i + 9).changes
        written.append(sorted(changes.users))
    # between compactions only the progress is stored; at one, each changed user once
    assert written == [[], [], [], ["u", "v"], [], [], [], ["u", "v"]]


def test_a_restore_replays_the_advances_since_the_snapshot_without_repeating_journeys():
    store = Store()
    book = JourneyBook(CFG, compact_every=100)
    store.apply(book.add([touch("u", 1), order("u", 5, "o1"), touch("u", 20)], watermark=0)[1])
    advanced = book.advance(10)
    (journey,) = advanced.closed
    store.apply(advanced.changes)
    assert store.users == {}  # nothing compacted yet: the log carries it
    restored = store.restore(compact_every=100)
    assert restored.users == book.users and restored.watermark == 10
    store.apply(restored.add([order("u", 30, "o2")], watermark=0)[1])
    (second,) = restored.advance(40).closed
    assert [t.ts_ms for t in second.touches] == [20] and second.stage == "repeat"
    assert journey.conversion.order_id == "o1"
