"""What a journey book holds of its users, and the forms in which an engine stores it.

The book (`udfs.journeys.book.JourneyBook`) keeps its users as columns: per user their last
order, next wake-up and a block of open touches in a shared pool (the strings of channels
and campaigns as codes). `UserColumns` is that storage: rows for new users, the whole of it
as a `Snapshot` and back, and compaction of the rows and touches no user holds any more.

What an engine stores is a snapshot plus a log (udfs/journeys/book.py says when the book
compacts): `Snapshot` (the users at a full compaction), `Overlay`s (at each compaction
since, only the users that changed and those dropped: applied over the snapshot in order),
`Progress` (the watermarks the book advanced to since the last compaction) and `Changes`
(what one call of the book asks to store or delete). A compaction that writes an overlay
writes what changed, not the whole book: in a live job most users are quiet between two
compactions.

`Snapshot` and `Progress` are stored pickled (a pickle names a class by its module), and
were defined in udfs.journey_book before they moved here: their `__module__` stays
udfs.journey_book, a path that imports as udfs/journeys/book.py (udfs/pickle_paths.py),
so state pickled by earlier versions loads and what is pickled now loads in those
versions too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from schemas.events import EventColumns
from udfs.journeys.columns import NONE, ranges_to_rows

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Progress:
    """The book's watermark at its last compaction and the advances since, in order."""

    compacted: int
    advances: tuple[int, ...] = ()

    @property
    def watermark(self) -> int:
        return self.advances[-1] if self.advances else self.compacted


class Snapshot(NamedTuple):
    """The whole book at a compaction (waiting batches are stored on their own)."""

    users: list[str]
    rows: np.ndarray  # int64 per user: their row in the book (kept, so that a restored
    # book steps users in the same order and emits the same journeys in the same order)
    last_order: np.ndarray  # int64 per user, NONE: none
    touch_counts: np.ndarray  # int64 per user: their open touches, flat below
    touch_ts: np.ndarray
    touch_channel: np.ndarray  # codes into channels
    touch_campaign: np.ndarray  # codes into campaigns
    touch_trace: np.ndarray  # object
    channels: list[str]
    campaigns: list[str]


class Overlay(NamedTuple):
    """The users that changed since the previous compaction (`changed.rows`: their rows as
    the book holds them, so that a restored book steps them in the same order) and the
    users the book dropped; `seq` orders the overlays since the snapshot (0, 1, ...)."""

    seq: int
    changed: Snapshot
    removed: list[str]


# the name their pickles record (see the module docstring)
Progress.__module__ = Snapshot.__module__ = Overlay.__module__ = "udfs.journey_book"


@dataclass
class Changes:
    """What one call asks the engine to store or delete."""

    snapshot: Snapshot | None = None  # replaces the stored snapshot and its overlays
    overlay: Overlay | None = None  # stored beside the snapshot, after those before it
    batches: dict[int, EventColumns] = field(default_factory=dict)  # store (new or left over)
    removed_batches: list[int] = field(default_factory=list)  # delete these
    progress: Progress | None = None  # store this (replaces the one stored)

    @property
    def compacted(self) -> bool:
        return self.snapshot is not None or self.overlay is not None


class Codes:
    """Strings as small ints, in first-seen order (codes never change)."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.names: list[str] = list(names or ())
        self.index = {name: code for code, name in enumerate(self.names)}

    def of(self, values: np.ndarray) -> np.ndarray:
        return lookup(values, self.index, self.names)


def lookup(values: np.ndarray, index: dict[str, int], names: list) -> np.ndarray:
    """Each value's number in `index`; a value not there yet gets the next number (in
    first-seen order) and is appended to `names`. Distinct values are looked up once (the
    hash table of pandas.factorize does the rest in C)."""
    if not len(values):
        return np.zeros(0, np.int64)
    local, distinct = pd.factorize(values)
    distinct = distinct.tolist()
    table = np.fromiter((index.get(v, -1) for v in distinct), np.int64, len(distinct))
    if table.min() < 0:
        for at in np.flatnonzero(table < 0).tolist():
            value = distinct[at]
            table[at] = index[value] = len(names)
            names.append(value)
    return table[local]


class Pool:
    """Every user's open touches, a block per user, in growable columns; a user's new
    block is appended and the old one left behind until the pool is compacted."""

    def __init__(self) -> None:
        self.size = 0
        self.ts = np.zeros(0, np.int64)
        self.channel = np.zeros(0, np.int64)
        self.campaign = np.zeros(0, np.int64)
        self.trace = np.zeros(0, object)

    def append(self, ts: np.ndarray, channel: np.ndarray, campaign: np.ndarray,
               trace: np.ndarray) -> int:
        start, end = self.size, self.size + len(ts)
        if end > len(self.ts):
            capacity = max(1024, 2 * end)
            for name in ("ts", "channel", "campaign", "trace"):
                old = getattr(self, name)
                grown = np.zeros(capacity, old.dtype)
                grown[:start] = old[:start]
                setattr(self, name, grown)
        self.ts[start:end] = ts
        self.channel[start:end] = channel
        self.campaign[start:end] = campaign
        self.trace[start:end] = trace
        self.size = end
        return start


class UserColumns:
    """Users by row: per row the user's last order, next wake-up (set by the book) and
    their block of open touches in the pool. A row whose user has nothing left to keep is
    freed (its name None) and reused only after `compact_rows`."""

    def __init__(self) -> None:
        self.users: dict[str, int] = {}  # user id -> row of the per-user columns
        self.names: list[str | None] = []  # row -> user id (None: a free row)
        self.last_order = np.zeros(0, np.int64)
        self.wake = np.zeros(0, np.int64)  # when the user next needs attention
        self.touch_start = np.zeros(0, np.int64)
        self.touch_count = np.zeros(0, np.int64)
        self.pool = Pool()
        self.channels = Codes()
        self.campaigns = Codes()
        # each row's user and state at the last compaction (`mark`): what changed since
        self._marked: tuple[np.ndarray, ...] | None = None

    def snapshot(self, users: list[str] | None = None) -> Snapshot:
        """The whole book, or only these of its users (those it holds), renumbered in
        their rows' order."""
        if users is None:
            rows = np.fromiter((row for row in self.users.values()), np.int64, len(self.users))
        else:
            held = sorted((self.users[user], user) for user in users if user in self.users)
            users = [user for _, user in held]
            rows = np.fromiter((row for row, _ in held), np.int64, len(held))
        counts = self.touch_count[rows]
        flat, _ = ranges_to_rows(self.touch_start[rows], self.touch_start[rows] + counts)
        pool = self.pool
        return Snapshot(list(self.users) if users is None else users,
                        rows if users is None else np.arange(len(rows), dtype=np.int64),
                        self.last_order[rows].copy(), counts.copy(),
                        pool.ts[flat], pool.channel[flat], pool.campaign[flat],
                        pool.trace[flat], list(self.channels.names),
                        list(self.campaigns.names))

    def load(self, snapshot: Snapshot) -> None:
        """The users of `snapshot`, in their rows; nobody wakes until the caller says when
        (the book computes `wake` from its rules)."""
        rows = np.asarray(snapshot.rows, np.int64)
        n = int(rows.max()) + 1 if len(rows) else 0
        self.names = [None] * n
        for user, row in zip(snapshot.users, rows.tolist(), strict=True):
            self.names[row] = user
        self.users = dict(zip(snapshot.users, rows.tolist(), strict=True))
        self.channels = Codes(snapshot.channels)
        self.campaigns = Codes(snapshot.campaigns)
        self.last_order = np.full(n, NONE, np.int64)
        self.last_order[rows] = snapshot.last_order
        self.wake = np.full(n, NEVER, np.int64)
        self.touch_count = np.zeros(n, np.int64)
        self.touch_count[rows] = snapshot.touch_counts
        self.touch_start = np.zeros(n, np.int64)
        starts = np.zeros(len(rows), np.int64)
        np.cumsum(np.asarray(snapshot.touch_counts, np.int64)[:-1], out=starts[1:])
        self.touch_start[rows] = starts
        self.pool = Pool()
        self.pool.append(snapshot.touch_ts, snapshot.touch_channel, snapshot.touch_campaign,
                         snapshot.touch_trace)

    def compact_rows(self) -> None:
        """Drop free user rows and touches no user holds any more."""
        live = np.fromiter(self.users.values(), np.int64, len(self.users))
        if len(self.names) > 2 * len(live) + 1024:
            live.sort()
            self.names = [self.names[row] for row in live.tolist()]
            self.users = {user: row for row, user in enumerate(self.names)}  # type: ignore
            for name in ("last_order", "wake", "touch_start", "touch_count"):
                setattr(self, name, getattr(self, name)[live])
        held = int(self.touch_count.sum())
        if self.pool.size > 2 * held + 4096:
            flat, offsets = ranges_to_rows(self.touch_start, self.touch_start + self.touch_count)
            old, self.pool = self.pool, Pool()
            self.pool.append(old.ts[flat], old.channel[flat], old.campaign[flat],
                             old.trace[flat])
            self.touch_start = offsets[:-1].copy()

    def rows_of(self, users: np.ndarray) -> np.ndarray:
        """Each user's row, new users given one."""
        before = len(self.names)
        rows = lookup(users, self.users, self.names)
        grow = len(self.names) - before
        if grow > 0:
            self.last_order = np.concatenate([self.last_order, np.full(grow, NONE)])
            self.wake = np.concatenate([self.wake, np.full(grow, NEVER)])
            self.touch_start = np.concatenate([self.touch_start, np.zeros(grow, np.int64)])
            self.touch_count = np.concatenate([self.touch_count, np.zeros(grow, np.int64)])
        return rows

    def names_of(self, rows: np.ndarray) -> np.ndarray:
        names = self.names
        out = np.empty(len(rows), object)
        out[:] = [names[row] for row in rows.tolist()]
        return out

    def replace_users(self, users: list[str], other: UserColumns) -> np.ndarray:
        """Take these users' state from `other` (a book that stepped them afresh): their
        rows here are freed, and those `other` holds get new rows with its last order and
        open touches (codes translated by name). Returns the new rows (the caller wakes
        them by its own rules)."""
        old = np.fromiter((self.users[user] for user in users if user in self.users),
                          np.int64)
        self.touch_count[old] = 0
        self.last_order[old] = NONE
        self.wake[old] = NEVER
        self.free(old)
        kept = [user for user in users if user in other.users]
        if not kept:
            return np.zeros(0, np.int64)
        theirs = np.fromiter((other.users[user] for user in kept), np.int64, len(kept))
        names = np.empty(len(kept), object)
        names[:] = kept
        rows = self.rows_of(names)
        self.last_order[rows] = other.last_order[theirs]
        counts = other.touch_count[theirs]
        flat, offsets = ranges_to_rows(other.touch_start[theirs],
                                       other.touch_start[theirs] + counts)
        pool = other.pool
        channel = self.channels.of(np.asarray(other.channels.names, object)[pool.channel[flat]])
        campaign = self.campaigns.of(
            np.asarray(other.campaigns.names, object)[pool.campaign[flat]])
        start = self.pool.append(pool.ts[flat], channel, campaign, pool.trace[flat])
        self.touch_start[rows] = start + offsets[:-1]
        self.touch_count[rows] = counts
        return rows

    def free(self, rows: np.ndarray) -> None:
        """Forget the users of `rows` (their rows stay, free, until `compact_rows`)."""
        for row in rows.tolist():
            del self.users[self.names[row]]
            self.names[row] = None

    # --- what changed since the last compaction -----------------------------------------

    def mark(self) -> None:
        """Remember every row's user and state as stored now (a compaction, a restore)."""
        self._marked = (object_array_of(self.names), self.touch_start.copy(),
                        self.touch_count.copy(), self.last_order.copy())

    def changed_since_mark(self) -> tuple[np.ndarray, list[str]] | None:
        """The rows whose user or state changed since `mark` (a user's new touches go to a
        new block, so a changed block shows in its start), and the users dropped; None
        before any mark."""
        if self._marked is None:
            return None
        names, start, count, last = self._marked
        now = object_array_of(self.names)
        n = len(names)
        held = now != None  # noqa: E711 - elementwise over an object array
        same = (now[:n] == names) & (self.touch_start[:n] == start) & \
            (self.touch_count[:n] == count) & (self.last_order[:n] == last)
        changed = np.flatnonzero(np.concatenate([held[:n] & ~same, held[n:]]))
        moved = np.flatnonzero(now[:n] != names)
        removed = [user for user in names[moved].tolist()
                   if user is not None and user not in self.users]
        return changed, removed

    def overlay(self, seq: int, rows: np.ndarray, removed: list[str]) -> Overlay:
        """These rows' users as an overlay (their rows kept), and the users dropped."""
        counts = self.touch_count[rows]
        flat, _ = ranges_to_rows(self.touch_start[rows], self.touch_start[rows] + counts)
        pool = self.pool
        return Overlay(seq, Snapshot(
            self.names_of(rows).tolist(), rows.copy(), self.last_order[rows].copy(),
            counts.copy(), pool.ts[flat], pool.channel[flat], pool.campaign[flat],
            pool.trace[flat], list(self.channels.names), list(self.campaigns.names)),
            list(removed))

    def apply(self, overlay: Overlay) -> None:
        """An overlay over what was loaded: its users in their rows, its dropped users
        gone (a user it moved to another row leaves the old one free)."""
        changed = overlay.changed
        for user in overlay.removed:
            row = self.users.pop(user, None)
            if row is not None:
                self.names[row] = None
                self.touch_count[row] = 0
                self.last_order[row] = NONE
        rows = np.asarray(changed.rows, np.int64)
        grow = (int(rows.max()) + 1 if len(rows) else 0) - len(self.names)
        if grow > 0:
            self.names.extend([None] * grow)
            self.last_order = np.concatenate([self.last_order, np.full(grow, NONE)])
            self.wake = np.concatenate([self.wake, np.full(grow, NEVER)])
            self.touch_start = np.concatenate([self.touch_start, np.zeros(grow, np.int64)])
            self.touch_count = np.concatenate([self.touch_count, np.zeros(grow, np.int64)])
        for user, row in zip(changed.users, rows.tolist(), strict=True):
            old = self.users.get(user)
            if old is not None and old != row:
                self.names[old] = None
                self.touch_count[old] = 0
                self.last_order[old] = NONE
            self.names[row] = user
            self.users[user] = row
        # codes only grow: the overlay's tables extend the snapshot's
        self.channels = Codes(changed.channels)
        self.campaigns = Codes(changed.campaigns)
        self.last_order[rows] = changed.last_order
        counts = np.asarray(changed.touch_counts, np.int64)
        starts = np.zeros(len(rows), np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        first = self.pool.append(changed.touch_ts, changed.touch_channel,
                                 changed.touch_campaign, changed.touch_trace)
        self.touch_start[rows] = first + starts
        self.touch_count[rows] = counts


def object_array_of(values: list) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = values
    return out
