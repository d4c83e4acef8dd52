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
