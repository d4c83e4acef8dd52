"""Many users' journeys advanced together by event time: what one key of the stream holds.

The stream is keyed by a bucket of users (`bucket_of`), not by the user: events travel in
batches (one per message and bucket) and a whole bucket moves forward in one call when
the watermark passes, so the engine's per-record costs are paid per batch, not per event.

Inside, each user is exactly the `udfs.journeys` state machine: events wait until the
watermark passes them, then each user's are stepped in event order; a user whose open
journey could close unconverted, or whose order history runs out, is woken when the
watermark reaches that time. The journeys that close are the same as when every user is
stepped on their own (the batch `closed_journeys_of`), whatever the batching.

An engine keeps a `JourneyBook` in memory, writes what each call changed (`Changes`) to
its own fault-tolerant state, and rebuilds the book from that state after a restart
(`JourneyBook.restore`).
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.records import Conversion, Touchpoint
from udfs.journeys import (
    ClosedJourney,
    JourneyConfig,
    JourneyState,
    close_stale,
    event_order,
    expire,
    next_wake_up,
    step,
)

Event = Touchpoint | Conversion


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket a user's events go to: stable across processes and restarts (Python's
    own str hash is salted per process)."""
    return zlib.crc32(user_id.encode()) % buckets


@dataclass
class Changes:
    """What one call changed, for the engine to mirror in its state."""

    users: dict[str, JourneyState] = field(default_factory=dict)  # store these
    removed_users: list[str] = field(default_factory=list)  # delete these
    batches: dict[int, list[Event]] = field(default_factory=dict)  # store (new or left over)
    removed_batches: list[int] = field(default_factory=list)  # delete these
    watermark: int | None = None  # store this (new): everything at or before it is stepped


@dataclass
class Advanced:
    closed: list[ClosedJourney]
    changes: Changes


class JourneyBook:
    """The users of one bucket: their journey states and the events not yet stepped."""

    def __init__(self, config: JourneyConfig) -> None:
        self.config = config
        self.users: dict[str, JourneyState] = {}
        self.batches: dict[int, list[Event]] = {}  # waiting events, by batch id
        self.watermark = -(2**63)  # everything at or before it has been stepped
        self._next_batch = 0
        self._batch_due: list[tuple[int, int]] = []  # heap: (earliest event, batch id)
        self._wake: dict[str, int] = {}  # user -> when they next need attention
        self._wake_due: list[tuple[int, str]] = []  # heap, entries may be stale

    @classmethod
    def restore(cls, config: JourneyConfig, watermark: int | None,
                users: Iterable[tuple[str, JourneyState]],
                batches: Iterable[tuple[int, list[Event]]]) -> JourneyBook:
        """The book whose state was stored as `watermark`, `users` and `batches`.

        The watermark is kept because the engine's own starts again from nothing after a
        restart: an event replayed from before it can no longer be stepped in order and
        is late, as it was before the restart."""
        book = cls(config)
        if watermark is not None:
            book.watermark = watermark
        for user, state in users:
            book.users[user] = state
            book._set_wake(user, next_wake_up(state, config))
        for batch_id, events in batches:
            book.batches[batch_id] = events
            heapq.heappush(book._batch_due, (min(e.ts_ms for e in events), batch_id))
            book._next_batch = max(book._next_batch, batch_id + 1)
        return book

    def add(self, events: Iterable[Event], watermark: int) -> tuple[list[Event], Changes]:
        """Take a batch of events; those at or before `watermark` (or the book's own) are
        late and returned, the others wait for the watermark to pass them."""
        bound = max(watermark, self.watermark)
        waiting: list[Event] = []
        late: list[Event] = []
        for event in events:
            (waiting if event.ts_ms > bound else late).append(event)
        changes = Changes()
        if waiting:
            batch_id = self._next_batch
            self._next_batch += 1
            self.batches[batch_id] = waiting
            heapq.heappush(self._batch_due, (min(e.ts_ms for e in waiting), batch_id))
            changes.batches[batch_id] = waiting
        return late, changes

    def next_due(self) -> int | None:
        """The earliest event time at which `advance` has something to do."""
        self._drop_stale_wakes()
        times = [heap[0][0] for heap in (self._batch_due, self._wake_due) if heap]
        return min(times) if times else None

    def advance(self, watermark: int) -> Advanced:
        """Step every waiting event at or before `watermark`, close and expire what that
        time closes or expires; returns the journeys closed and the state changes."""
        changes = Changes()
        if watermark <= self.watermark:
            return Advanced([], changes)
        self.watermark = changes.watermark = watermark
        due_batches = []
        while self._batch_due and self._batch_due[0][0] <= watermark:
            due_batches.append(heapq.heappop(self._batch_due)[1])
        # batch ids grow with arrival: in id order, a user's events keep their arrival
        # order, which decides between events of the same time (as a stable sort does)
        due_batches.sort()
        ready: dict[str, list[Event]] = {}
        for batch_id in due_batches:
            left: list[Event] = []
            for event in self.batches.pop(batch_id):
                if event.ts_ms <= watermark:
                    ready.setdefault(event.user_id, []).append(event)
                else:
                    left.append(event)
            if left:
                self.batches[batch_id] = left
                heapq.heappush(self._batch_due, (min(e.ts_ms for e in left), batch_id))
                changes.batches[batch_id] = left
            else:
                changes.removed_batches.append(batch_id)
        while self._wake_due and self._wake_due[0][0] <= watermark:
            at, user = heapq.heappop(self._wake_due)
            if self._wake.get(user) == at:
                ready.setdefault(user, [])
        closed: list[ClosedJourney] = []
        config = self.config
        for user, events in ready.items():
            state = self.users.get(user) or JourneyState()
            if len(events) > 1:
                events.sort(key=event_order)
            for event in events:
                state, journeys = step(state, event, config)
                closed.extend(journeys)
            state, stale = close_stale(state, watermark, config)
            closed.extend(stale)
            state = expire(state, watermark, config)
            wake = next_wake_up(state, config)
            if wake is None:  # nothing left to remember about this user
                if self.users.pop(user, None) is not None:
                    changes.removed_users.append(user)
                self._wake.pop(user, None)
            else:
                self.users[user] = state
                changes.users[user] = state
                self._set_wake(user, wake)
        return Advanced(closed, changes)

    def _set_wake(self, user: str, at: int | None) -> None:
        if at is None or self._wake.get(user) == at:
            return
        self._wake[user] = at
        heapq.heappush(self._wake_due, (at, user))

    def _drop_stale_wakes(self) -> None:
        heap = self._wake_due
        while heap and self._wake.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
