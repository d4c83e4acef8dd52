"""One visit, one touch (`journey.visit_minutes`): a touch of the channel and campaign of
the user's touch kept before it, at most the visit's length later, continues that visit
(a reload of the landing page, a second page of it, a second click on the same ad) and is
no new touch. `udfs.journeys.rules.step` applies it event by event; here over the columns
a journey book steps (udfs/journeys/book.py), to the same journeys."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from schemas.events import OrderColumns, TouchColumns
from udfs.journeys.columns import ranges_to_rows
from udfs.journeys.rules import JourneyConfig


class Users(Protocol):
    """What of a journey book (udfs/journeys/book.py) the visits are judged from: its
    users' open touches in the shared pool, the codes of channels and campaigns."""

    config: JourneyConfig
    touch_start: np.ndarray
    touch_count: np.ndarray
    pool: Any
    channels: Any
    campaigns: Any

    def rows_of(self, users: np.ndarray) -> np.ndarray: ...


def new_visits(book: Users, touches: TouchColumns, touch_rows: np.ndarray,
               orders: OrderColumns) -> np.ndarray:
    """Which of the due touches (their users' rows in the book) start a visit, judged
    against the users' open touches, which come before them in time (what the book
    stepped before is at or behind its watermark)."""
    users = np.unique(touch_rows)
    held_from = book.touch_start[users]
    held, _ = ranges_to_rows(held_from, held_from + book.touch_count[users])
    pool = book.pool
    n_held, n_new = len(held), len(touch_rows)
    order_rows = book.rows_of(orders.user_id)
    user = np.concatenate([np.repeat(users, book.touch_count[users]), touch_rows, order_rows])
    ts = np.concatenate([pool.ts[held], touches.ts_ms, orders.ts_ms])
    is_order = np.zeros(len(ts), bool)
    is_order[n_held + n_new:] = True
    none = np.full(len(order_rows), -1, np.int64)
    continuing = same_visit_rows(
        user, ts, is_order, np.arange(len(ts), dtype=np.int64),
        np.concatenate([pool.channel[held], book.channels.of(touches.channel), none]),
        np.concatenate([pool.campaign[held], book.campaigns.of(touches.campaign), none]),
        book.config.visit_ms)
    return ~continuing[n_held:n_held + n_new]


def same_visit_rows(user: np.ndarray, ts: np.ndarray, is_order: np.ndarray, seq: np.ndarray,
                    channel: np.ndarray, campaign: np.ndarray, visit_ms: int) -> np.ndarray:
    """Per row, whether it is a touch that continues the visit of the touch kept before it
    (`udfs.journeys.rules.same_visit`: the same channel and campaign codes, at most
    `visit_ms` later, no order between): rows in `step_users`' order. Only the touches
    right after such a touch are candidates; a run of them is resolved one by one against
    the last touch kept (a reload 20 minutes after the landing and another 20 minutes
    later: the second is 40 minutes after the touch kept, a visit of its own)."""
    drop = np.zeros(len(ts), bool)
    if visit_ms <= 0 or len(ts) < 2:
        return drop
    order = np.lexsort((seq, is_order, ts, user))
    u, t, o = user[order], ts[order], is_order[order].astype(bool)
    c, k = channel[order], campaign[order]
    follows = (u[1:] == u[:-1]) & ~o[1:] & ~o[:-1] & (c[1:] == c[:-1]) & (k[1:] == k[:-1]) \
        & (t[1:] - t[:-1] <= visit_ms)
    dropped: set[int] = set()
    for at in (np.flatnonzero(follows) + 1).tolist():
        kept = at - 1
        while kept in dropped:  # back to the touch kept before it (same user and codes)
            kept -= 1
        if t[at] - t[kept] <= visit_ms:
            dropped.add(at)
    if dropped:
        drop[order[sorted(dropped)]] = True
    return drop
