"""Late events that correct instead of being lost: a journey book with a correction horizon.

A stream steps journeys when its watermark passes them, and the watermark depends on
timing (how partitions are read, a pause, a restart). An event behind the watermark is
therefore late by accident of timing, not of the data. Within `horizon_ms` of the
watermark such an event corrects what it changes: its users are stepped again, from
their state at the horizon, over every event they have within it, and what closes now
differs from what was closed before is reported as a correction (the versions that no
longer hold, and those that do). After any arrival order, the journeys reported, with
each correction applied, are those of the events stepped in time order: what the batch
(`udfs.journeys.rules.closed_journeys_of`) and the backfill compute. Only an event at or behind
watermark - horizon is late.

Two books hold a bucket's users:
- `live` at the watermark W: what the stream reports from (kept in memory only);
- `settled` at most at W - horizon: every event newer than its watermark waits in it (its
  waiting batches are the horizon's log). It is what an engine stores (snapshot, batches
  and progress, as `udfs.journeys.book` describes), with W beside it; `restore` rebuilds
  both, `live` by replaying the log up to W.

A correction steps only the users it concerns: their state in `settled`, their events in
the log (found through an index of users by batch) up to W, once without the new events
(what was reported) and once with them (what holds). `live` then takes their new state.
Cost: the log holds the horizon's events (memory and state grow with it), stepping is
done twice (`settled` trails `live`), and a correction costs in proportion to the
corrected users' events within the horizon.

With horizon 0 the two books are one and nothing changes: an event at or behind W is
late.

The end of the input (W = END_OF_INPUT: a drain, a bounded run's end) closes every journey
in `live`; `settled` stays where it was, with its log. Events can still come after it (at a
drain, from an input that was idle when the final watermark passed the others): they are
taken as at the watermark before the end, so that those within the horizon of it correct
what they change, as they would have a moment earlier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schemas.events import EMPTY, EventColumns, earliest, size, take
from udfs.journeys.book import NOTHING_CLOSED, Advanced, JourneyBook
from udfs.journeys.columns import (
    ClosedJourneys,
    ConvertedJourneys,
    JourneyTouches,
    LapsedJourneys,
)
from udfs.journeys.rules import JourneyConfig
from udfs.journeys.state import Changes, Overlay, Progress, Snapshot

END_OF_INPUT = 2**63 - 1  # the final watermark (Flink's Long.MAX_VALUE)


def settle_step_ms(horizon_ms: int) -> int:
    """How far `settled` trails in one step: an eighth of the horizon, at least an hour
    (each step is a call over the bucket's users: fewer, larger ones cost less)."""
    return max(3_600_000, horizon_ms // 8)



@dataclass
class Correction:
    """What late events changed: the journeys reported before that no longer hold, and
    the ones that hold now (a conversion whose journey changed is in both)."""

    retracted: ClosedJourneys
    added: ClosedJourneys

    def __bool__(self) -> bool:
        return bool(len(self.retracted) or len(self.added))


NO_CORRECTION = Correction(NOTHING_CLOSED, NOTHING_CLOSED)


@dataclass
class Added:
    late: EventColumns  # at or behind watermark - horizon: not taken
    changes: Changes  # what to store
    correction: Correction  # what the events within the horizon changed


class CorrectingBook:
    """A bucket's users with a correction horizon (see the module docstring)."""

    def __init__(self, config: JourneyConfig, horizon_ms: int,
                 live: JourneyBook | None = None, settled: JourneyBook | None = None) -> None:
        if horizon_ms < 0:
            raise ValueError(f"the correction horizon must be 0 or more, got {horizon_ms}")
        self.config = config
        self.horizon_ms = horizon_ms
        self.settle_step_ms = settle_step_ms(horizon_ms)
        self.settled = settled if settled is not None else JourneyBook(config)
        self.live = live if live is not None else (
            self.settled if not horizon_ms else JourneyBook(config, keeps_log=False))
        # user -> batch ids of `settled` with them: built at the first correction (until
        # then nothing needs it), kept up from there
        self._by_user: dict[str, list[int]] | None = None
        self._indexed = 0  # entries in _by_user (some of batches stepped since)
        self._rebuilt_at = 0  # entries right after the index was last built
        # the live watermark before the end of the input, once it has come (see the
        # module docstring)
        self.before_end: int | None = None

    @property
    def watermark(self) -> int:
        return self.live.watermark

    @property
    def batches(self) -> dict[int, EventColumns]:
        return self.settled.batches

    @classmethod
    def restore(cls, config: JourneyConfig, horizon_ms: int, live_watermark: int | None,
                progress: Progress | None, snapshot: Snapshot | None,
                batches: list[tuple[int, EventColumns]],
                overlays: Sequence[Overlay] = ()) -> CorrectingBook:
        """The book whose `settled` state was stored, and `live` replayed from it up to
        `live_watermark` (what it had reported is not reported again)."""
        settled = JourneyBook.restore(config, progress, snapshot, batches, overlays=overlays)
        if not horizon_ms:
            return cls(config, 0, settled, settled)
        live = JourneyBook.restore(config, progress, snapshot, batches, keeps_log=False,
                                   overlays=overlays)
        if live_watermark is not None and live_watermark > live.watermark:
            live.advance(live_watermark)
        return cls(config, horizon_ms, live, settled)

    def add(self, events: EventColumns, watermark: int) -> Added:
        """Take a batch: events after the watermark wait, those within the horizon behind
        it correct, older ones are late (returned)."""
        if not self.horizon_ms:
            late, changes = self.live.add(events, watermark)
            return Added(late, changes, NO_CORRECTION)
        # `live`'s own watermark, not the stream's: an event after it waits there (to be
        # stepped with the next advance), one at or before it was stepped past
        now = self.watermark
        if size(events) and earliest(events) > now:  # the common case: all of it waits
            self.live.add(events, now)
            _, changes = self.settled.add(events, self.settled.watermark)
            if self._by_user is not None:
                for batch_id, batch in changes.batches.items():
                    self._index(batch_id, batch)
            return Added(EMPTY, changes, NO_CORRECTION)
        self.live.add(_newer(events, now), now)  # waiting there too (same arrays)
        reference = self.before_end if now >= END_OF_INPUT and self.before_end is not None \
            else now
        bound = max(reference - self.horizon_ms, self.settled.watermark)
        taken = _newer(events, bound)
        late = _newer(events, bound, older=True)
        correcting = _newer(taken, now, older=True)
        users = _users(correcting)
        logged = self._logged_events(users, now) if users else None
        _, changes = self.settled.add(taken, self.settled.watermark)
        if self._by_user is not None:
            for batch_id, batch in changes.batches.items():
                self._index(batch_id, batch)
        if logged is None:
            return Added(late, changes, NO_CORRECTION)
        wanted = np.asarray(users, dtype=object)
        added = [(batch_id, _of_users(batch, wanted, now))
                 for batch_id, batch in changes.batches.items()]
        before, after = self._users_book(users, logged), self._users_book(users,
                                                                          logged + added)
        old, new = before.advance(now).closed, after.advance(now).closed
        self.live.adopt(users, after)
        return Added(late, changes, correction_between(old, new))

    def withdraw_orders(self, copies: Counter[tuple]) -> dict[int, Counter[tuple]]:
        """`JourneyBook.withdraw_orders` on both books: what was taken out of the stored
        (`settled`) batches. A copy `live` had stepped already stays credited there."""
        if self.live is not self.settled:
            self.live.withdraw_orders(Counter(copies))
        return self.settled.withdraw_orders(copies)

    def next_due(self) -> int | None:
        return self.live.next_due()

    def advance(self, watermark: int) -> Advanced:
        """Step `live` to the watermark (what closes is reported) and `settled` to the
        horizon behind it (what closes there was reported before; what to store)."""
        if self.live is self.settled:
            return self.live.advance(watermark)
        if watermark >= END_OF_INPUT and self.before_end is None:
            self.before_end = self.live.watermark
        advanced = self.live.advance(watermark)
        # `settled` follows in steps (each costs a call over its users), not at every move;
        # not to the end of the input (events after it correct from its log)
        if watermark < END_OF_INPUT and \
                watermark - self.horizon_ms >= self.settled.watermark + self.settle_step_ms:
            changes = self.settled.advance(watermark - self.horizon_ms).changes
            if changes.compacted:
                self._reindex()
            return Advanced(advanced.closed, changes)
        return Advanced(advanced.closed, Changes())

    def compact(self) -> Changes:
        return self.settled.compact()

    # --- the horizon's log -----------------------------------------------------------

    def _index(self, batch_id: int, batch: EventColumns) -> None:
        index = self._by_user
        assert index is not None
        for user in _users(batch):
            index.setdefault(user, []).append(batch_id)
            self._indexed += 1

    def _build_index(self) -> dict[str, list[int]]:
        self._by_user, self._indexed = {}, 0
        for batch_id in sorted(self.settled.batches):
            self._index(batch_id, self.settled.batches[batch_id])
        self._rebuilt_at = self._indexed
        return self._by_user

    def _reindex(self) -> None:
        """Forget the batches stepped since, once the index has doubled since it was last
        built (a rebuild reads every waiting batch: amortised, it costs O(1) an entry)."""
        if self._by_user is not None and self._indexed > 2 * self._rebuilt_at + 65_536:
            self._build_index()

    def _logged_events(self, users: list[str], until: int) -> list[tuple[int, EventColumns]]:
        """These users' events in the horizon's log up to `until`, by batch id."""
        batches = self.settled.batches
        index = self._by_user if self._by_user is not None else self._build_index()
        ids = sorted({batch_id for user in users for batch_id in index.get(user, ())
                      if batch_id in batches})
        wanted = np.asarray(users, dtype=object)
        return [(batch_id, _of_users(batches[batch_id], wanted, until)) for batch_id in ids]

    def _users_book(self, users: list[str],
                    events: list[tuple[int, EventColumns]]) -> JourneyBook:
        """These users alone, as `settled` holds them, with these of their events waiting:
        stepping it to the live watermark gives what `live` reports of them."""
        return JourneyBook.restore(self.config, Progress(self.settled.watermark),
                                   self.settled.snapshot(users),
                                   [(batch_id, batch) for batch_id, batch in events
                                    if size(batch)], keeps_log=False)


def _users(events: EventColumns) -> list[str]:
    if not size(events):
        return []
    return pd.unique(np.concatenate([events.touches.user_id,
                                     events.orders.user_id])).tolist()


def _newer(events: EventColumns, bound: int, older: bool = False) -> EventColumns:
    """The events after `bound` (or, `older`, at or before it)."""
    touches = events.touches.ts_ms > bound
    orders = events.orders.ts_ms > bound
    if older:
        touches, orders = ~touches, ~orders
    if touches.all() and orders.all():
        return events
    if not touches.any() and not orders.any():
        return EMPTY
    return EventColumns(take(events.touches, touches), take(events.orders, orders))


def _of_users(events: EventColumns, users: np.ndarray, until: int) -> EventColumns:
    touches = events.touches.ts_ms <= until
    touches &= pd.Series(events.touches.user_id).isin(users).to_numpy()
    orders = events.orders.ts_ms <= until
    orders &= pd.Series(events.orders.user_id).isin(users).to_numpy()
    return EventColumns(take(events.touches, touches), take(events.orders, orders))


# --- what changed -------------------------------------------------------------------


def _touch_keys(touches: JourneyTouches) -> list[tuple]:
    bounds = touches.offsets.tolist()
    flat = list(zip(touches.ts_ms.tolist(), touches.channel.tolist(),
                    touches.campaign.tolist(), touches.trace_id.tolist(), strict=True))
    return [tuple(flat[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def converted_keys(c: ConvertedJourneys) -> list[Hashable]:
    return list(zip(c.order_id.tolist(), c.user_id.tolist(), c.ts_ms.tolist(),
                    c.revenue.tolist(), c.currency.tolist(), c.trace_id.tolist(),
                    c.stage.tolist(), _touch_keys(c.touches), strict=True))


def _lapsed_keys(lapsed: LapsedJourneys) -> list[Hashable]:
    return list(zip(lapsed.user_id.tolist(), lapsed.close_ts_ms.tolist(),
                    _touch_keys(lapsed.touches), strict=True))


def unmatched(keys: list[Hashable], others: list[Hashable]) -> np.ndarray:
    """Which of `keys` have no equal in `others` (each match used once)."""
    left = Counter(others)
    mask = np.zeros(len(keys), bool)
    for at, key in enumerate(keys):
        if left[key]:
            left[key] -= 1
        else:
            mask[at] = True
    return mask


def _select_lapsed(lapsed: LapsedJourneys, mask: np.ndarray) -> LapsedJourneys:
    return LapsedJourneys(lapsed.user_id[mask], lapsed.close_ts_ms[mask],
                          lapsed.touches.select(mask))


def correction_between(old: ClosedJourneys, new: ClosedJourneys) -> Correction:
    """The journeys of `old` that `new` lacks (retracted) and those of `new` that `old`
    lacks (added), each compared whole."""
    old_c, new_c = converted_keys(old.converted), converted_keys(new.converted)
    old_l, new_l = _lapsed_keys(old.lapsed), _lapsed_keys(new.lapsed)
    return Correction(
        ClosedJourneys(old.converted.select(unmatched(old_c, new_c)),
                       _select_lapsed(old.lapsed, unmatched(old_l, new_l))),
        ClosedJourneys(new.converted.select(unmatched(new_c, old_c)),
                       _select_lapsed(new.lapsed, unmatched(new_l, old_l))))
