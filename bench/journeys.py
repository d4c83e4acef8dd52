"""The journey engine side by side with the event-by-event rules it implements.

Every engine closes journeys with `udfs.journeys.book.JourneyBook` (the stream per watermark
step; the backfill and `seedance attribute` with every event at once). `udfs/journeys/rules.py`
states the same rules one user and one event at a time (the reference the property tests
compare against, and what the backfill ran before). This times both on the same synthetic
events, checks they close the same journeys, and prints events/s and the ratio.

    .venv/bin/python bench/journeys.py                  # 1,000,000 events
    .venv/bin/python bench/journeys.py --events 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schemas.events import EventColumns, OrderColumns, TouchColumns, object_array  # noqa: E402
from schemas.records import Conversion, Touchpoint  # noqa: E402
from udfs.journeys import (  # noqa: E402
    ConvertedJourney,
    JourneyBook,  # noqa: E402
    JourneyConfig,
    closed_journeys_of,
)
from udfs.periods import DAY_MS  # noqa: E402

CHANNELS = np.array(["paid_search", "paid_social", "display", "email", "affiliate",
                     "organic_search"], dtype=object)


def synthetic(events: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                np.ndarray]:
    """(user, ts_ms, is_order, channel) of `events` events over 60 days, ~4 per user,
    one in five an order."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, max(1, events // 4), events)
    ts = 1_790_812_800_000 + rng.integers(0, 60 * DAY_MS, events)
    is_order = rng.random(events) < 0.2
    channel = CHANNELS[rng.integers(0, len(CHANNELS), events)]
    return users, ts, is_order, channel


def with_book(users: np.ndarray, ts: np.ndarray, is_order: np.ndarray,
              channel: np.ndarray, config: JourneyConfig) -> tuple[int, int]:
    names = object_array([f"u{u}" for u in users.tolist()])
    touch, order = ~is_order, is_order
    blank_t, blank_o = object_array([""] * int(touch.sum())), object_array([""] * int(order.sum()))
    events = EventColumns(
        TouchColumns(names[touch], ts[touch], channel[touch], blank_t, blank_t, blank_t),
        OrderColumns(names[order], ts[order],
                     object_array([f"o{i}" for i in range(int(order.sum()))]),
                     np.full(int(order.sum()), 10.0), blank_o, blank_o, blank_o))
    book = JourneyBook(config)
    book.add(events, np.iinfo(np.int64).min)
    closed = book.advance(2**62).closed
    return len(closed.converted), len(closed.lapsed)


def with_reference(users: np.ndarray, ts: np.ndarray, is_order: np.ndarray,
                   channel: np.ndarray, config: JourneyConfig) -> tuple[int, int]:
    by_user: dict[str, list[Touchpoint | Conversion]] = defaultdict(list)
    for i, (user, at, kind, chan) in enumerate(zip(users.tolist(), ts.tolist(),
                                                   is_order.tolist(), channel.tolist(),
                                                   strict=True)):
        name = f"u{user}"
        by_user[name].append(Conversion(name, at, f"o{i}", 10.0, "", "", "") if kind
                             else Touchpoint(name, at, chan, "", "", ""))
    converted = lapsed = 0
    for events in by_user.values():
        for journey in closed_journeys_of(events, config):
            if isinstance(journey, ConvertedJourney):
                converted += 1
            else:
                lapsed += 1
    return converted, lapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2, help="best of N per engine")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    data = synthetic(args.events, args.seed)
    config = JourneyConfig()
    results = {}
    for name, engine in (("per-user reference (udfs/journeys/rules.py)", with_reference),
                         ("journey book (udfs/journeys/book.py)", with_book)):
        best = float("inf")
        for _ in range(args.rounds):
            started = time.perf_counter()
            counts = engine(*data, config)
            best = min(best, time.perf_counter() - started)
        results[name] = (best, counts)
        print(f"{name:40} {best:7.2f} s  {args.events / best:12,.0f} events/s  "
              f"{counts[0]:,} converted, {counts[1]:,} unconverted journeys")
    (ref_s, ref_counts), (book_s, book_counts) = results.values()
    assert ref_counts == book_counts, "the engines closed different journeys"
    print(f"ratio journey book / reference: {ref_s / book_s:.1f}x the events per second")


if __name__ == "__main__":
    main()
