"""Many users' journeys advanced together by event time: what one key of the stream holds.

The stream is keyed by a bucket of users (`bucket_of`), not by the user: events travel in
batches (one per message and bucket) and a whole bucket moves forward in one call when
the watermark passes, so the engine's per-record costs are paid per batch, not per event.

Inside, each user is exactly the `udfs.journeys` state machine: events wait until the
watermark passes them, then each user's are stepped in event order; a user whose open
journey could close unconverted, or whose order history runs out, is woken when the
watermark reaches that time. The journeys that close are the same as when every user is
stepped on their own (the batch `closed_journeys_of`), whatever the batching.

An engine keeps a `JourneyBook` in memory and writes what each call reports (`Changes`)
to its own fault-tolerant state; after a restart `JourneyBook.restore` rebuilds the same
book from that state. What is stored is a snapshot plus a log: the users' states as of the
last compaction, every batch that arrived since (as it arrived), and the watermarks the
book advanced to since. Restoring replays those advances, which is exact because an
advance depends on nothing but the events and the watermark. Every `compact_every`
advances the book reports the users that changed (once each, however often they changed)
and the batches it has finished with, and the log starts again: far fewer writes than
storing every user each time they change.
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
    advance_user,
    event_order,
    next_wake_up,
)

Event = Touchpoint | Conversion
COMPACT_EVERY = 32


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket a user's events go to: stable across processes and restarts (Python's
    own str hash is salted per process)."""
    return zlib.crc32(user_id.encode()) % buckets


@dataclass(frozen=True)
class Progress:
    """The book's watermark at its last compaction and the advances since, in order."""

    compacted: int
    advances: tuple[int, ...] = ()

    @property
    def watermark(self) -> int:
        return self.advances[-1] if self.advances else self.compacted


@dataclass
class Changes:
    """What one call asks the engine to store or delete."""

    users: dict[str, JourneyState] = field(default_factory=dict)  # store these
    removed_users: list[str] = field(default_factory=list)  # delete these
    batches: dict[int, list[Event]] = field(default_factory=dict)  # store (new or left over)
    removed_batches: list[int] = field(default_factory=list)  # delete these
    progress: Progress | None = None  # store this (replaces the one stored)


@dataclass
class Advanced:
    closed: list[ClosedJourney]
    changes: Changes


class JourneyBook:
    """The users of one bucket: their journey states and the events not yet stepped."""

    def __init__(self, config: JourneyConfig, compact_every: int = COMPACT_EVERY) -> None:
        self.config = config
        self.compact_every = compact_every
        self.users: dict[str, JourneyState] = {}
        self.batches: dict[int, list[Event]] = {}  # waiting events, by batch id
        self.progress = Progress(-(2**63))
        self._next_batch = 0
        self._batch_due: list[tuple[int, int]] = []  # heap: (earliest event, batch id)
        # When each user next needs attention, and a heap that holds, for every user in
        # `_wake`, one entry at or before that time (`_queued`: the time of that entry).
        # A touch moves a user's wake-up later; the entry is left where it is and moved
        # on only when it comes due, so a busy user costs one heap entry per lookback, not
        # one per event.
        self._wake: dict[str, int] = {}
        self._queued: dict[str, int] = {}
        self._wake_due: list[tuple[int, str]] = []  # heap; entries not in _queued are stale
        # since the last compaction: what the stored snapshot does not have yet
        self._changed_users: set[str] = set()
        self._finished_batches: set[int] = set()  # stored, but nothing left waiting
        self._cut_batches: set[int] = set()  # stored whole, partly stepped since

    @property
    def watermark(self) -> int:
        """Everything at or before it has been stepped."""
        return self.progress.watermark

    @classmethod
    def restore(cls, config: JourneyConfig, progress: Progress | None,
                users: Iterable[tuple[str, JourneyState]],
                batches: Iterable[tuple[int, list[Event]]],
                compact_every: int = COMPACT_EVERY) -> JourneyBook:
        """The book whose state was stored: the snapshot's users, the stored batches and
        the progress; the advances since the snapshot are replayed (their journeys were
        emitted before the state was stored, so they are not returned again).

        The watermark is kept because the engine's own starts again from nothing after a
        restart: an event replayed from before it can no longer be stepped in order and
        is late, as it was before the restart."""
        book = cls(config, compact_every)
        for user, state in users:
            book.users[user] = state
            book._set_wake(user, next_wake_up(state, config))
        for batch_id, events in batches:
            book.batches[batch_id] = events
            heapq.heappush(book._batch_due, (min(e.ts_ms for e in events), batch_id))
            book._next_batch = max(book._next_batch, batch_id + 1)
        if progress is not None:
            book.progress = Progress(progress.compacted)
            for watermark in progress.advances:
                book._step_to(watermark)
            book.progress = progress
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
        time closes or expires; returns the journeys closed and what to store."""
        changes = Changes()
        if watermark <= self.watermark:
            return Advanced([], changes)
        closed = self._step_to(watermark)
        advances = (*self.progress.advances, watermark)
        if len(advances) < self.compact_every:
            self.progress = changes.progress = Progress(self.progress.compacted, advances)
        else:
            self._compact(watermark, changes)
        return Advanced(closed, changes)

    def compact(self) -> Changes:
        """Report everything the stored snapshot lacks now, and start the log again (an
        engine may call this whenever it likes, e.g. before it stops)."""
        changes = Changes()
        self._compact(self.watermark, changes)
        return changes

    def _compact(self, watermark: int, changes: Changes) -> None:
        for user in self._changed_users:
            state = self.users.get(user)
            if state is None:
                changes.removed_users.append(user)
            else:
                changes.users[user] = state
        changes.removed_batches.extend(self._finished_batches)
        for batch_id in self._cut_batches - self._finished_batches:
            changes.batches[batch_id] = self.batches[batch_id]
        self._changed_users.clear()
        self._finished_batches.clear()
        self._cut_batches.clear()
        self.progress = changes.progress = Progress(watermark)

    def _step_to(self, watermark: int) -> list[ClosedJourney]:
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
                self._cut_batches.add(batch_id)
            else:
                self._finished_batches.add(batch_id)
        wake_due, queued = self._wake_due, self._queued
        self._drop_stale_wakes()
        while wake_due and wake_due[0][0] <= watermark:
            user = heapq.heappop(wake_due)[1]  # due: its queued time is its wake-up
            del queued[user]
            ready.setdefault(user, [])
            self._drop_stale_wakes()
        closed: list[ClosedJourney] = []
        config, users = self.config, self.users
        self._changed_users.update(ready)
        for user, events in ready.items():
            if len(events) > 1:
                events.sort(key=event_order)
            state, journeys, wake = advance_user(users.get(user), events, watermark, config)
            if journeys:
                closed += journeys
            if state is None:  # nothing left to remember about this user
                users.pop(user, None)
                self._wake.pop(user, None)
            else:
                users[user] = state
                self._set_wake(user, wake)
        return closed

    def _set_wake(self, user: str, at: int | None) -> None:
        if at is None:
            return
        self._wake[user] = at
        queued = self._queued.get(user)
        if queued is None or at < queued:
            self._queued[user] = at
            heapq.heappush(self._wake_due, (at, user))

    def _drop_stale_wakes(self) -> None:
        """Make the heap's first entry the earliest wake-up: stale entries dropped, one
        whose user's wake-up moved on since is queued again at the new time."""
        heap, wakes, queued = self._wake_due, self._wake, self._queued
        while heap:
            at, user = heap[0]
            if queued.get(user) != at:
                heapq.heappop(heap)
                continue
            due = wakes.get(user)
            if due == at:
                return
            if due is None:
                del queued[user]
                heapq.heappop(heap)
            else:
                queued[user] = due
                heapq.heapreplace(heap, (due, user))
