"""Many users' journeys advanced together by event time: what one key of the stream holds.

The stream is keyed by a bucket of users (`bucket_of`), not by the user: events travel in
batches (one per message and bucket, as columns: `schemas.events`) and a whole bucket moves
forward in one call when the watermark passes, so the engine's per-record costs are paid
per batch, not per event.

Inside, events wait until the watermark passes them; then every waiting event at or before
it, and every user whose open journey could close unconverted or whose order history runs
out by then, are stepped together by `udfs.journeys.columns.step_users` (the rules of
`udfs/journeys/rules.py`, over arrays; a visit's touches folded first: visits.py). The
journeys that close are those of every user stepped on their own (the batch
`closed_journeys_of`), whatever the batching. Users are kept as columns too (UserColumns:
last order, next wake-up, a block of open touches in a shared pool).

An engine keeps a `JourneyBook` in memory and stores what each call reports (`Changes`) in
its own fault-tolerant state; `JourneyBook.restore` rebuilds the same book after a restart
from a snapshot and a log: the book as of a full compaction, an overlay per compaction
since (the users that changed, and those dropped), every batch that arrived since and the
watermarks the book advanced to since (replaying those advances is exact). The book
compacts (an overlay, or a new snapshot when the overlays would hold more than the book)
once the log has grown as large as the book, at least `compact_every` advances apart, so
storing costs in proportion to what arrives and changes. The stored forms are defined in
udfs/journeys/state.py, importable from here (their pickles name it).
"""

from __future__ import annotations

import heapq
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.events import (
    EMPTY,
    EventColumns,
    OrderColumns,
    TouchColumns,
    concat,
    earliest,
    size,
    take,
    without_orders,
)
from udfs.journeys.columns import (
    NONE,
    ClosedJourneys,
    ConvertedJourneys,
    JourneyTouches,
    LapsedJourneys,
    ranges_to_rows,
    step_users,
)
from udfs.journeys.rules import JourneyConfig
from udfs.journeys.state import NEVER, Changes, Overlay, Progress, Snapshot, UserColumns
from udfs.journeys.visits import new_visits
from udfs.lifecycle import stages_of

COMPACT_EVERY = 32
MAX_LOGGED_ADVANCES = 1024  # bounds the replay after a restart in a quiet period
# A compaction writes an overlay while the overlays since the snapshot hold fewer users
# than the book (a restore then reads at most about twice the book) and this one changes
# at most this share of them; otherwise a new snapshot.
OVERLAY_SHARE = 0.5


def bucket_of(user_id: str, buckets: int) -> int:
    """The bucket a user's events go to: stable across processes and restarts (Python's
    own str hash is salted per process)."""
    return zlib.crc32(user_id.encode()) % buckets


@dataclass
class Advanced:
    closed: ClosedJourneys
    changes: Changes


class JourneyBook(UserColumns):
    """The users of one bucket: their journeys in progress (the columns it inherits) and the
    events not yet stepped."""

    overlay_share = OVERLAY_SHARE  # below 0: every compaction a whole snapshot

    def __init__(self, config: JourneyConfig, compact_every: int = COMPACT_EVERY,
                 log_ratio: float = 1.0, keeps_log: bool = True) -> None:
        super().__init__()
        self.config = config
        # False: nothing of this book is stored (another holds the log, see
        # udfs/journeys/corrections.py), so a compaction only tidies memory
        self.keeps_log = keeps_log
        self.compact_every = compact_every
        self.log_ratio = log_ratio  # compact once the log holds this many events per row
        self.batches: dict[int, EventColumns] = {}  # waiting events, by batch id
        self.progress = Progress(-(2**63))
        self._next_batch = 0
        self._batch_due: list[tuple[int, int]] = []  # heap: (earliest event, batch id)
        self._next_wake = NEVER
        self._logged = 0  # events added since the last compaction
        self._finished_batches: set[int] = set()  # stored, but nothing left waiting
        self._cut_batches: set[int] = set()  # stored whole, partly stepped since
        self._overlays = 0  # stored since the snapshot
        self._overlay_users = 0  # the users they hold, together

    @property
    def watermark(self) -> int:
        """Everything at or before it has been stepped."""
        return self.progress.watermark

    # --- engine calls ----------------------------------------------------------------

    @classmethod
    def restore(cls, config: JourneyConfig, progress: Progress | None,
                snapshot: Snapshot | None, batches: list[tuple[int, EventColumns]],
                compact_every: int = COMPACT_EVERY, log_ratio: float = 1.0,
                keeps_log: bool = True, overlays: Sequence[Overlay] = ()) -> JourneyBook:
        """The book whose state was stored: the snapshot, the stored batches and the
        progress; the advances since the snapshot are replayed (their journeys were
        emitted before the state was stored, so they are not returned again).

        The watermark is kept because the engine's own starts again from nothing after a
        restart: an event replayed from before it can no longer be stepped in order and
        is late, as it was before the restart."""
        book = cls(config, compact_every, log_ratio, keeps_log)
        if snapshot is not None:
            book.load(snapshot)
            for overlay in sorted(overlays, key=lambda overlay: overlay.seq):
                book.apply(overlay)
                book._overlays += 1
                book._overlay_users += len(overlay.changed.users)
            book.mark()
            book.wake = book._wake_of(np.arange(len(book.names)))
            book._next_wake = int(book.wake.min()) if len(book.names) else NEVER
        for batch_id, events in sorted(batches, key=lambda item: item[0]):
            book._wait(batch_id, events)
            book._logged += size(events)
            book._next_batch = max(book._next_batch, batch_id + 1)
        if progress is not None:
            book.progress = Progress(progress.compacted)
            for watermark in progress.advances:
                book._step_to(watermark)
            book.progress = progress
        return book

    def add(self, events: EventColumns, watermark: int) -> tuple[EventColumns, Changes]:
        """Take a batch of events; those at or before `watermark` (or the book's own) are
        late and returned, the others wait for the watermark to pass them."""
        bound = max(watermark, self.watermark)
        late_touches = events.touches.ts_ms <= bound
        late_orders = events.orders.ts_ms <= bound
        changes = Changes()
        if late_touches.any() or late_orders.any():
            late = EventColumns(take(events.touches, late_touches),
                                take(events.orders, late_orders))
            events = EventColumns(take(events.touches, ~late_touches),
                                  take(events.orders, ~late_orders))
        else:
            late = EMPTY
        if size(events):
            batch_id = self._next_batch
            self._next_batch += 1
            self._wait(batch_id, events)
            self._logged += size(events)
            changes.batches[batch_id] = events
        return late, changes

    def withdraw_orders(self, copies: Counter[tuple]) -> dict[int, Counter[tuple]]:
        """Take these order copies (rows in Conversion's field order; a duplicate the
        order check turned down) out of the waiting batches, each as often as counted
        (`copies` is counted down by what was found): what was taken, per batch id, for
        the engine to take out of its stored batches too."""
        taken: dict[int, Counter[tuple]] = {}
        for batch_id in sorted(self.batches):
            if not +copies:
                break
            before = +copies
            kept = without_orders(self.batches[batch_id], copies)
            if kept is None:
                continue
            taken[batch_id] = before - +copies
            if size(kept):
                self.batches[batch_id] = kept  # its heap entry may be early: harmless
            else:
                del self.batches[batch_id]
                self._cut_batches.discard(batch_id)
                self._finished_batches.add(batch_id)  # removed at the next compaction
        return taken

    def adopt(self, users: list[str], other: JourneyBook) -> None:
        """These users' state as `other` has it (stepped afresh to this book's watermark,
        udfs/journeys/corrections.py); their waiting events here stay as they are."""
        rows = self.replace_users(users, other)
        self.wake[rows] = self._wake_of(rows)
        self._next_wake = int(self.wake.min()) if len(self.wake) else NEVER

    def next_due(self) -> int | None:
        """The earliest event time at which `advance` has something to do."""
        due = min(self._batch_due[0][0] if self._batch_due else NEVER, self._next_wake)
        return None if due == NEVER else due

    def advance(self, watermark: int) -> Advanced:
        """Step every waiting event at or before `watermark`, close and expire what that
        time closes or expires; returns the journeys closed and what to store."""
        changes = Changes()
        if watermark <= self.watermark:
            return Advanced(NOTHING_CLOSED, changes)
        closed = self._step_to(watermark)
        advances = (*self.progress.advances, watermark)
        state_rows = len(self.users) + int(self.touch_count.sum())
        # the log as large as the book, and either enough steps since to amortise the
        # compaction or (few, large steps: spaced watermarks) a log twice the book
        grown = self._logged >= self.log_ratio * state_rows
        if len(advances) >= MAX_LOGGED_ADVANCES or grown and (
                len(advances) >= self.compact_every
                or self._logged >= 2 * self.log_ratio * state_rows):
            self._compact(watermark, changes)
        else:
            self.progress = changes.progress = Progress(self.progress.compacted, advances)
        return Advanced(closed, changes)

    def compact(self) -> Changes:
        """Report everything the stored snapshot lacks now, and start the log again (an
        engine may call this whenever it likes, e.g. before it stops)."""
        changes = Changes()
        self._compact(self.watermark, changes)
        return changes

    # --- state -----------------------------------------------------------------------

    def _compact(self, watermark: int, changes: Changes) -> None:
        self.compact_rows()
        if not self.keeps_log:
            self._finished_batches.clear()
            self._cut_batches.clear()
            self._logged = sum(size(events) for events in self.batches.values())
            self.progress = Progress(watermark)
            return
        self._snapshot_or_overlay(changes)
        changes.removed_batches.extend(self._finished_batches)
        for batch_id in self._cut_batches - self._finished_batches:
            changes.batches[batch_id] = self.batches[batch_id]
        self._finished_batches.clear()
        self._cut_batches.clear()
        self._logged = sum(size(events) for events in self.batches.values())
        self.progress = changes.progress = Progress(watermark)

    def _snapshot_or_overlay(self, changes: Changes) -> None:
        """What this compaction stores of the users: those that changed since the last
        one, or all of them (see OVERLAY_SHARE)."""
        since = self.changed_since_mark()
        users = len(self.users)
        if since is not None:
            rows, removed = since
            changed = len(rows) + len(removed)
            if changed <= self.overlay_share * users and \
                    self._overlay_users + changed <= users:
                changes.overlay = self.overlay(self._overlays, rows, removed)
                self._overlays += 1
                self._overlay_users += changed
                self.mark()
                return
        changes.snapshot = self.snapshot()
        self._overlays = self._overlay_users = 0
        self.mark()

    # --- stepping --------------------------------------------------------------------

    def _wait(self, batch_id: int, events: EventColumns) -> None:
        self.batches[batch_id] = events
        heapq.heappush(self._batch_due, (earliest(events), batch_id))

    def _due_events(self, watermark: int) -> EventColumns:
        """The waiting events at or before `watermark`, taken out of their batches."""
        due_batches = []
        while self._batch_due and self._batch_due[0][0] <= watermark:
            due_batches.append(heapq.heappop(self._batch_due)[1])
        # batch ids grow with arrival: in id order, a user's events keep their arrival
        # order, which decides between events of the same time and kind
        due_batches.sort()
        touches: list[TouchColumns] = []
        orders: list[OrderColumns] = []
        for batch_id in due_batches:
            events = self.batches.pop(batch_id, None)
            if events is None:  # all its events withdrawn
                continue
            touch_due = events.touches.ts_ms <= watermark
            order_due = events.orders.ts_ms <= watermark
            if touch_due.all() and order_due.all():
                touches.append(events.touches)
                orders.append(events.orders)
                self._finished_batches.add(batch_id)
                continue
            touches.append(take(events.touches, touch_due))
            orders.append(take(events.orders, order_due))
            self._wait(batch_id, EventColumns(take(events.touches, ~touch_due),
                                              take(events.orders, ~order_due)))
            self._cut_batches.add(batch_id)
        if not touches:
            return EMPTY
        return EventColumns(concat(touches), concat(orders))

    def _step_to(self, watermark: int) -> ClosedJourneys:
        events = self._due_events(watermark)
        touches, orders = events
        touch_rows = self.rows_of(touches.user_id)
        if self.config.visit_ms and len(touch_rows):  # journey.visit_minutes
            new = new_visits(self, touches, touch_rows, orders)
            touches, touch_rows = take(touches, new), touch_rows[new]
        order_rows = self.rows_of(orders.user_id)
        # NEVER is the largest time: a free row must not wake even at the final watermark
        woken = np.flatnonzero(self.wake <= min(watermark, NEVER - 1))
        involved = np.unique(np.concatenate([touch_rows, order_rows, woken]))
        if not len(involved):
            return NOTHING_CLOSED
        # the involved users' open touches, then the new touches, then the orders
        held_from = self.touch_start[involved]
        held, _ = ranges_to_rows(held_from, held_from + self.touch_count[involved])
        held_users = np.repeat(involved, self.touch_count[involved])
        pool = self.pool
        n_held, n_new = len(held), len(touch_rows)
        ts = np.concatenate([pool.ts[held], touches.ts_ms, orders.ts_ms])
        user = np.concatenate([held_users, touch_rows, order_rows])
        is_order = np.zeros(len(ts), bool)
        is_order[n_held + n_new:] = True
        seq = np.arange(len(ts), dtype=np.int64)  # held first, then arrival order
        stepped = step_users(user, ts, is_order, seq, self.last_order, watermark, self.config)
        # touch columns in the order step_users sorted the rows (ranges index it)
        sorted_rows = stepped.sorted_rows
        channel = np.concatenate([pool.channel[held], self.channels.of(touches.channel),
                                  np.zeros(len(order_rows), np.int64)])[sorted_rows]
        campaign = np.concatenate([pool.campaign[held], self.campaigns.of(touches.campaign),
                                   np.zeros(len(order_rows), np.int64)])[sorted_rows]
        trace = np.concatenate([pool.trace[held], touches.trace_id,
                                np.empty(len(order_rows), object)])[sorted_rows]
        ts_sorted = ts[sorted_rows]

        channel_names = np.asarray(self.channels.names, dtype=object)
        campaign_names = np.asarray(self.campaigns.names, dtype=object)

        def journey_touches(ranges: tuple[np.ndarray, np.ndarray]) -> JourneyTouches:
            flat, offsets = ranges_to_rows(*ranges)
            if not len(flat):
                return JourneyTouches(offsets, _NO_TOUCHES.ts_ms, _NO_TOUCHES.channel,
                                      _NO_TOUCHES.campaign, _NO_TOUCHES.trace_id)
            return JourneyTouches(offsets, ts_sorted[flat], channel_names[channel[flat]],
                                  campaign_names[campaign[flat]], trace[flat])

        order_at = stepped.order_rows - n_held - n_new
        names = np.asarray(orders.user_id, dtype=object)[order_at]
        converted = ConvertedJourneys(
            names, orders.ts_ms[order_at], orders.order_id[order_at],
            orders.revenue[order_at], orders.currency[order_at], orders.trace_id[order_at],
            stages_of(stepped.previous_order, orders.ts_ms[order_at], names == "",
                      self.config.lifecycle),
            journey_touches(stepped.order_touches))
        lapsed = LapsedJourneys(self.names_of(stepped.lapsed_users), stepped.lapsed_close,
                                journey_touches(stepped.lapsed_touches))

        # what the involved users keep
        config = self.config
        with_rows = stepped.users
        newer = stepped.last_order != NONE
        self.last_order[with_rows[newer]] = stepped.last_order[newer]
        self.touch_count[involved] = 0
        if len(stepped.open_users):
            flat, offsets = ranges_to_rows(*stepped.open_touches)
            start = pool.append(ts_sorted[flat], channel[flat], campaign[flat], trace[flat])
            self.touch_start[stepped.open_users] = start + offsets[:-1]
            self.touch_count[stepped.open_users] = np.diff(offsets)
        last_order = self.last_order[involved]
        expired = (last_order != NONE) & (last_order + config.history_ms < watermark)
        self.last_order[involved[expired]] = NONE
        self.wake[involved] = self._wake_of(involved)
        self.free(involved[self.wake[involved] == NEVER])
        self._next_wake = int(self.wake.min()) if len(self.wake) else NEVER
        return ClosedJourneys(converted, lapsed)

    def _wake_of(self, rows: np.ndarray) -> np.ndarray:
        """When each user next needs attention: their open touches' lookback passing, or
        their last order leaving the history (NEVER: nothing left to keep)."""
        config = self.config
        count = self.touch_count[rows]
        last_touch = self.pool.ts[np.maximum(self.touch_start[rows] + count - 1, 0)] \
            if self.pool.size else np.zeros(len(rows), np.int64)
        touch_wake = np.where(count > 0, last_touch + config.lookback_ms + 1, NEVER)
        last_order = self.last_order[rows]
        order_wake = np.where(last_order != NONE, last_order + config.history_ms + 1, NEVER)
        return np.minimum(touch_wake, order_wake)

_NO_TOUCHES = JourneyTouches(np.zeros(1, np.int64), np.zeros(0, np.int64),
                             np.zeros(0, object), np.zeros(0, object), np.zeros(0, object))
_EMPTY = np.zeros(0, object)
NOTHING_CLOSED = ClosedJourneys(
    ConvertedJourneys(_EMPTY, np.zeros(0, np.int64), _EMPTY, np.zeros(0), _EMPTY, _EMPTY,
                      _EMPTY, _NO_TOUCHES),
    LapsedJourneys(_EMPTY, np.zeros(0, np.int64), _NO_TOUCHES))

