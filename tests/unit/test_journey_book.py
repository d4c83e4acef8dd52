"""A bucket of users advanced together closes the journeys each user closes on their own."""

from __future__ import annotations

import pickle
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.events import events_of, records_of
from tests.journey_records import CAPPED, CFG, MINUTE, VISITS, Store, closed_of, key, order, touch
from udfs.journeys.book import Changes, JourneyBook, bucket_of
from udfs.journeys.rules import (
    JourneyConfig,
    JourneyState,
    advance_user,
    closed_journeys_of,
    event_order,
    next_wake_up,
)
from udfs.periods import DAY_MS


def add(book: JourneyBook, events: list, watermark: int) -> tuple[list, Changes]:
    late, changes = book.add(events_of(events), watermark)
    return records_of(late), changes


def run(events, batch_size: int, watermark_steps: list[int], restart_at: int | None,
        slack: int, compact_every: int = 2, config: JourneyConfig = CFG):
    """Feed `events` in arrival order, in batches, advancing the watermark to `slack`
    behind the newest event seen after each batch; optionally rebuild the book from the
    store mid-way (a restart). Returns (closed journeys, late events, store)."""
    store = Store()
    book = JourneyBook(config, compact_every, log_ratio=0.0)
    closed, late = [], []
    newest = -(2**62)
    for index, start in enumerate(range(0, len(events), batch_size)):
        batch = events[start:start + batch_size]
        newest = max([newest, *(e.ts_ms for e in batch)])
        bound = newest - slack
        on_time = [e for e in batch if e.ts_ms > bound]
        late += [e for e in batch if e.ts_ms <= bound]
        refused, changes = add(book, on_time, watermark=-(2**63))
        late += refused
        store.apply(changes)
        if watermark_steps[index % len(watermark_steps)]:
            due = book.next_due()
            if due is not None and due <= bound:
                advanced = book.advance(bound)
                closed += closed_of(advanced)
                store.apply(advanced.changes)
        if restart_at == index:
            book = store.restore(compact_every, config=config)
    advanced = book.advance(2**62)  # the end of the input: everything closes
    closed += closed_of(advanced)
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
            at += rng.choice([0, 1, 20 * MINUTE, DAY_MS, 10 * DAY_MS, 30 * DAY_MS,
                              30 * DAY_MS + 1, 31 * DAY_MS, 120 * DAY_MS])
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
       restart=st.one_of(st.none(), st.integers(0, 8)), compact_every=st.integers(1, 4),
       config=st.sampled_from([CFG, CAPPED, VISITS]))
def test_closes_what_each_user_closes_alone_whatever_the_batching(events, batch_size,
                                                                   watermark_steps, restart,
                                                                   compact_every, config):
    closed, late, store = run(events, batch_size, watermark_steps, restart, slack=5 * DAY_MS,
                              compact_every=compact_every, config=config)
    on_time = [e for e in events if e not in late]
    expected = []
    for user in {e.user_id for e in on_time}:
        expected += closed_journeys_of([e for e in on_time if e.user_id == user], config)
    assert sorted(map(key, closed)) == sorted(map(key, expected))
    # at the end of time nothing waits and nobody is remembered
    assert pickle.loads(store.snapshot).users == [] and store.batches == {}


def test_late_events_are_refused_and_nothing_is_lost():
    book = JourneyBook(CFG)
    add(book, [touch("u", 100), touch("u", 300)], watermark=0)
    book.advance(200)
    late, _ = add(book, [touch("u", 150), touch("u", 250)], watermark=120)
    assert late == [touch("u", 150)]  # behind the book's own watermark (200)
    (journey,) = closed_of(book.advance(10**15))
    assert [t.ts_ms for t in journey.touches] == [100, 250, 300]


def test_a_restored_book_remembers_its_watermark():
    store = Store()
    book = JourneyBook(CFG, compact_every=10)
    store.apply(add(book, [touch("u", 100)], watermark=0)[1])
    store.apply(book.advance(500).changes)
    restored = store.restore(compact_every=10)
    late, _ = add(restored, [touch("u", 400), touch("u", 600)], watermark=-(2**63))
    assert late == [touch("u", 400)]


def test_next_due_is_the_earliest_waiting_event_or_wake_up():
    book = JourneyBook(CFG)
    assert book.next_due() is None
    add(book, [touch("u", 5 * DAY_MS), order("v", 2 * DAY_MS, "o")], watermark=0)
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
        add(book, [touch("u", last)], watermark=-1)
        assert closed_of(book.advance(last)) == []
    assert book.next_due() == last + CFG.lookback_ms + 1
    assert closed_of(book.advance(last + CFG.lookback_ms)) == []
    closed = closed_of(book.advance(last + CFG.lookback_ms + 1))
    assert [(type(j).__name__, len(j.touches), j.close_ts_ms) for j in closed] == [
        ("NonConvertingJourney", 31, last + CFG.lookback_ms + 1)]
    assert book.next_due() is None


def test_a_wake_up_moved_earlier_fires_at_the_earlier_time():
    short = JourneyConfig(lookback_days=30, history_days=100, winback_days=90)
    book = JourneyBook(short)
    add(book, [order("u", DAY_MS, "o")], watermark=-1)
    book.advance(DAY_MS)
    assert book.next_due() == DAY_MS + short.history_ms + 1  # the order history
    add(book, [touch("u", 2 * DAY_MS)], watermark=-1)
    book.advance(2 * DAY_MS)
    assert book.next_due() == 2 * DAY_MS + short.lookback_ms + 1  # now the open touch
    closed = closed_of(book.advance(2 * DAY_MS + short.lookback_ms + 1))
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


def test_the_book_compacts_once_its_log_outgrows_its_snapshot():
    book = JourneyBook(CFG, compact_every=4)
    snapshots = []
    for i in range(12):
        # u buys what it touched (nothing stays open); v's touches pile up in the book
        add(book, [touch("u", 10 * i + 5), order("u", 10 * i + 6, f"o{i}"),
                   touch("v", 10 * i + 7)], watermark=-1)
        snapshots.append(book.advance(10 * i + 9).changes.snapshot is not None)
    # at least `compact_every` advances apart, and only once the log holds as many events
    # as the book holds users and open touches: 12 >= 2 + 4 and 12 >= 2 + 8, not 12 < 2 + 12
    assert [i for i, taken in enumerate(snapshots) if taken] == [3, 7]


def test_a_restore_replays_the_advances_since_the_snapshot_without_repeating_journeys():
    store = Store()
    book = JourneyBook(CFG, compact_every=100, log_ratio=10.0)
    store.apply(add(book, [touch("u", 1), order("u", 5, "o1"), touch("u", 20)], watermark=0)[1])
    advanced = book.advance(10)
    (journey,) = closed_of(advanced)
    store.apply(advanced.changes)
    assert store.snapshot is None  # nothing compacted yet: the log carries it
    restored = store.restore(compact_every=100)
    assert restored.users == book.users and restored.watermark == 10
    store.apply(add(restored, [order("u", 30, "o2")], watermark=0)[1])
    (second,) = closed_of(restored.advance(40))
    assert [t.ts_ms for t in second.touches] == [20] and second.stage == "repeat"
    assert journey.conversion.order_id == "o1"


class PerUser:
    """The rules stepped user by user (udfs.journeys.rules.advance_user), at the same watermarks
    as a book: the reference for what a book forgets (order history, stale touches)."""

    def __init__(self, config: JourneyConfig) -> None:
        self.config = config
        self.states: dict[str, JourneyState] = {}
        self.waiting: list = []

    def advance(self, watermark: int) -> list:
        due = [e for e in self.waiting if e.ts_ms <= watermark]
        self.waiting = [e for e in self.waiting if e.ts_ms > watermark]
        by_user: dict[str, list] = {}
        for event in due:
            by_user.setdefault(event.user_id, []).append(event)
        for user, state in self.states.items():
            wake = next_wake_up(state, self.config)
            if wake is not None and wake <= watermark:
                by_user.setdefault(user, [])
        closed = []
        for user, events in by_user.items():
            events.sort(key=event_order)
            state, journeys, _ = advance_user(self.states.get(user), events, watermark,
                                              self.config)
            closed += journeys
            if state is None:
                self.states.pop(user, None)
            else:
                self.states[user] = state
        return closed


@settings(max_examples=150, deadline=None)
@given(events=populations(), batch_size=st.integers(1, 7),
       restart=st.one_of(st.none(), st.integers(0, 8)))
def test_forgets_order_history_and_stale_touches_as_each_user_does(events, batch_size, restart):
    config = JourneyConfig(lookback_days=30, history_days=40, winback_days=35, max_touches=3)
    events = events + [order("", events[0].ts_ms + 1, "anonymous")]  # an order without user
    store, book, reference = Store(), JourneyBook(config, 2, log_ratio=0.0), PerUser(config)
    closed, expected, late = [], [], []
    for index, start in enumerate(range(0, len(events), batch_size)):
        refused, changes = add(book, events[start:start + batch_size], watermark=-(2**63))
        store.apply(changes)
        late += refused
        reference.waiting += [e for e in events[start:start + batch_size] if e not in refused]
        bound = max(e.ts_ms for e in events[:start + batch_size]) - 5 * DAY_MS
        # step to each time something is due (exactly when a history or lookback runs
        # out), then to the bound
        while (due := book.next_due()) is not None and book.watermark < due <= bound:
            for watermark in (due - 1, due):
                if watermark > book.watermark:
                    advanced = book.advance(watermark)
                    store.apply(advanced.changes)
                    closed += closed_of(advanced)
                    expected += reference.advance(watermark)
        if bound > book.watermark:
            advanced = book.advance(bound)
            store.apply(advanced.changes)
            closed += closed_of(advanced)
            expected += reference.advance(bound)
        if restart == index:
            book = store.restore(2, config=config)
    for watermark in (10**13, 2**62):  # long after: histories run out, everything closes
        closed += closed_of(book.advance(watermark))
        expected += reference.advance(watermark)
    assert sorted(map(key, closed)) == sorted(map(key, expected))
    assert book.users == {} and book.next_due() is None


def test_the_final_watermark_closes_everything_and_empties_the_book():
    """A bounded input ends with the largest watermark there is: every journey closes,
    every user is forgotten, also those forgotten before (their rows stay free)."""
    book = JourneyBook(CFG)
    add(book, [touch("a", 10), touch("b", 20), order("b", 30, "o1")], -1)
    first = book.advance(40 + CFG.lookback_ms)  # a's journey lapses, b is remembered
    assert [journey.user_id for journey in first.closed.lapsed_objects()] == ["a"]
    assert [j.conversion.order_id for j in first.closed.converted_objects()] == ["o1"]
    add(book, [touch("c", 50 + CFG.lookback_ms)], book.watermark)
    last = book.advance(2**63 - 1)
    assert [journey.user_id for journey in last.closed.lapsed_objects()] == ["c"]
    assert book.users == {} and book.next_due() is None


def _state_by_user(book: JourneyBook) -> dict:
    """Each user's row, last order and open touches (channels by name), comparable."""
    snap = book.snapshot()
    out, at = {}, 0
    for user, row, last, count in zip(snap.users, snap.rows.tolist(), snap.last_order.tolist(),
                                      snap.touch_counts.tolist(), strict=True):
        touches = [(int(snap.touch_ts[i]), snap.channels[snap.touch_channel[i]],
                    snap.campaigns[snap.touch_campaign[i]]) for i in range(at, at + count)]
        out[user] = (row, last, touches)
        at += count
    return out


def test_a_compaction_stores_only_the_users_that_changed_and_a_restore_equals_the_book():
    """Many quiet users, a few busy ones: after the first full snapshot each compaction
    stores an overlay of the users whose state changed and of those dropped, and the book
    restored from the snapshot and its overlays at any point holds what the live one does,
    row for row, and closes the same journeys after."""
    short = JourneyConfig(lookback_days=30, history_days=40, winback_days=35)
    start = 40 * DAY_MS
    users = [f"quiet-{n:03d}" for n in range(120)]
    early = [f"early-{n}" for n in range(3)]  # their journeys lapse during the test
    store, book = Store(), JourneyBook(short, compact_every=1, log_ratio=0.0)
    store.apply(add(book, [touch(user, start + n) for n, user in enumerate(users)]
                    + [touch(user, start - 26 * DAY_MS + n * DAY_MS)
                       for n, user in enumerate(early)], -1)[1])
    store.apply(book.advance(start + DAY_MS).changes)
    assert store.snapshot is not None and not store.overlays
    overlays, dropped = [], []
    for day in range(2, 12):
        busy = [users[day], users[day + 50]]
        now = start + day * DAY_MS
        events = [touch(busy[0], now, "search"), order(busy[1], now + 1, f"o-{day}")]
        if day == 6:
            events.append(touch("newcomer", now + 2, "social"))
        store.apply(add(book, events, -1)[1])
        advanced = book.advance(now + 10)
        store.apply(advanced.changes)
        overlay = advanced.changes.overlay
        assert overlay is not None  # a few users changed: never the whole book again
        overlays.append(overlay)
        assert set(overlay.changed.users) <= {*busy, "newcomer"} and busy[0] in \
            overlay.changed.users
        dropped += overlay.removed
        restored = store.restore(compact_every=1, config=short)
        assert _state_by_user(restored) == _state_by_user(book)
        assert restored.next_due() == book.next_due()
    assert sorted(dropped) == early and not set(early) & set(book.users)
    assert sum(len(o.changed.users) for o in overlays) < len(users)  # not the whole book
    end = 2**62
    assert sorted(map(key, closed_of(restored.advance(end)))) == \
        sorted(map(key, closed_of(book.advance(end))))
