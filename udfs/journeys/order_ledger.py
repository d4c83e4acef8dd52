"""An order counts once: the order ids seen in a horizon of event time, so that an order sent
again (a retried export, a replayed message) is recognised as a duplicate and not credited a
second time.

Engine-free: the streaming job keeps one ledger per bucket of order ids (whatever the user:
copies of one order from different users meet there) and mirrors what it adds and forgets
into keyed state (pipelines/flink/attribution/dedup.py). Which copy is kept does not depend on
arrival: the copies the watermark has passed are admitted earliest first (`OrderLedger.admit`).
"""

from __future__ import annotations

from collections.abc import Iterable

# expiry runs at most once per this much event time, and the remembered orders are indexed
# by it: an expiry reads the orders of the hours it passes, not every order remembered
EXPIRE_EVERY_MS = 3_600_000


class OrderLedger:
    def __init__(self, horizon_ms: int, seen: Iterable[tuple[str, int]] = ()) -> None:
        if horizon_ms <= 0:
            raise ValueError(f"the duplicate-order horizon must be positive, got {horizon_ms}")
        self.horizon_ms = horizon_ms
        self.seen: dict[str, int] = dict(seen)  # order id -> event time of its first copy
        self.by_hour: dict[int, list[str]] = {}  # EXPIRE_EVERY_MS slot -> ids first seen in it
        for order_id, ts in self.seen.items():
            self.by_hour.setdefault(ts // EXPIRE_EVERY_MS, []).append(order_id)
        self.expired_to = -(2**62)

    def admit(self, copies: list[tuple[str, int, str, str]]) -> tuple[list[bool],
                                                                       dict[str, int]]:
        """Which of these copies (order id, event time, user, span) are first copies, and
        the ids newly remembered (id -> time). They are taken by (event time, user, span),
        not as they came: of copies due together the earliest is kept, whatever the order
        in which partitions delivered them; a copy of an id seen before is a duplicate."""
        order = sorted(range(len(copies)), key=lambda at: copies[at][1:])
        keep = [False] * len(copies)
        added: dict[str, int] = {}
        for at in order:
            order_id, ts = copies[at][0], copies[at][1]
            if order_id not in self.seen:
                self.seen[order_id] = added[order_id] = ts
                self.by_hour.setdefault(ts // EXPIRE_EVERY_MS, []).append(order_id)
                keep[at] = True
        return keep, added

    def expire(self, watermark: int) -> list[str]:
        """Forget orders whose first copy is more than the horizon behind `watermark` (a copy
        of one arriving later is late by then); the ids forgotten. Walks the ledger at most
        once per EXPIRE_EVERY_MS of event time."""
        if watermark - self.expired_to < EXPIRE_EVERY_MS:
            return []
        self.expired_to = watermark
        cutoff = watermark - self.horizon_ms
        gone: list[str] = []
        for slot in sorted(slot for slot in self.by_hour if slot <= cutoff // EXPIRE_EVERY_MS):
            kept = []
            for order_id in self.by_hour.pop(slot):
                if self.seen[order_id] < cutoff:
                    del self.seen[order_id]
                    gone.append(order_id)
                else:  # the slot the cutoff falls in
                    kept.append(order_id)
            if kept:
                self.by_hour[slot] = kept
        return gone
