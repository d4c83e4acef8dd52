from __future__ import annotations

import pytest

from udfs.journeys.order_ledger import EXPIRE_EVERY_MS, OrderLedger
from udfs.periods import DAY_MS


def copies(*pairs: tuple[str, int]) -> list[tuple[str, int, str, str]]:
    """(order id, time) pairs as copies from one user, spans in the given order."""
    return [(order_id, ts, "u", f"s{n}") for n, (order_id, ts) in enumerate(pairs)]


def test_a_second_copy_is_a_duplicate_in_another_batch_and_in_the_same_one():
    ledger = OrderLedger(30 * DAY_MS)
    keep, added = ledger.admit(copies(("o1", 10), ("o2", 20)))
    assert keep == [True, True] and added == {"o1": 10, "o2": 20}
    keep, added = ledger.admit(copies(("o3", 30), ("o1", 99), ("o3", 31)))
    assert keep == [True, False, False] and added == {"o3": 30}
    assert ledger.seen["o1"] == 10  # the first copy's time is kept


def test_orders_are_forgotten_once_the_horizon_has_passed_them():
    ledger = OrderLedger(DAY_MS, [("old", 0), ("new", DAY_MS)])
    assert ledger.expire(DAY_MS + 1) == ["old"]
    assert ledger.expire(DAY_MS + 2) == []  # walked at most once per EXPIRE_EVERY_MS
    assert ledger.expire(2 * DAY_MS + EXPIRE_EVERY_MS) == ["new"]
    keep, _ = ledger.admit(copies(("old", 5)))
    assert keep == [True]
    with pytest.raises(ValueError, match="must be positive"):
        OrderLedger(0)


def test_copies_due_together_keep_the_earliest_whatever_their_arrival():
    ledger = OrderLedger(30 * DAY_MS)
    keep, added = ledger.admit([("o1", 50, "u9", "s1"), ("o1", 20, "u5", "s2"),
                                ("o2", 30, "u1", "s3"), ("o1", 20, "u3", "s4")])
    # o1 at 20 twice: the lower user id (u3) wins the tie
    assert keep == [False, False, True, True] and added == {"o1": 20, "o2": 30}
    keep, _ = ledger.admit([("o1", 10, "u0", "s0")])
    assert keep == [False]  # decided before: later copies are duplicates


@pytest.mark.parametrize("restored", [False, True])
def test_expiry_forgets_exactly_the_orders_behind_the_horizon_reading_only_their_hours(
        restored: bool) -> None:
    """Random orders admitted and expired as a watermark moves in uneven steps (some within
    an hour, some over days): after every expiry the ledger holds exactly the orders at or
    after the cutoff (what a walk over every order would keep), whether it was built by
    admitting them or restored from the remembered ids, as an engine restores it."""
    import random

    rng = random.Random(7)
    horizon = 2 * DAY_MS
    ledger = OrderLedger(horizon)
    expected: dict[str, int] = {}
    watermark, last_walk = 0, -(2**62)
    for step in range(300):
        watermark += rng.choice([60_000, EXPIRE_EVERY_MS // 2, EXPIRE_EVERY_MS, DAY_MS // 3])
        batch = [(f"o{rng.randrange(3000)}", watermark - rng.randrange(DAY_MS), "u", "s")
                 for _ in range(rng.randrange(20))]
        _, added = ledger.admit(batch)
        for order_id, ts in added.items():
            expected[order_id] = ts
        if restored and step % 50 == 0:
            ledger = OrderLedger(horizon, ledger.seen.items())  # as after a restart
            ledger.expired_to = last_walk
        gone = ledger.expire(watermark)
        if watermark - last_walk >= EXPIRE_EVERY_MS:
            last_walk = watermark
            cutoff = watermark - horizon
            assert sorted(gone) == sorted(k for k, ts in expected.items() if ts < cutoff)
            expected = {k: ts for k, ts in expected.items() if ts >= cutoff}
        else:
            assert gone == []
        assert ledger.seen == expected
