"""What a bucket's journey book writes to keyed state in a live job: at every compaction
the whole book (a snapshot), or an overlay of the users that changed and those dropped
(udfs/journeys/state.py `Overlay`), side by side on the same events.

With RocksDB's incremental checkpoints a checkpoint uploads what was written since the
previous one, so these bytes are what checkpoints carry. The book is driven as the
journeys operator drives it (pipelines/flink/attribution/journeys.py: every batch, every
compaction's snapshot or overlay, pickled as stored): first a history (`--users` users,
each with a few touches and orders over the year before; its writes are not counted),
then `--hours` of live traffic in which `--active` of the users come back in a day, with
a watermark step every `--step-s` seconds (the job's watermark interval: the book
compacts at the latest every 1,024 steps, udfs/journeys/book.py MAX_LOGGED_ADVANCES).
Both runs must close the same journeys, and the book restored from each run's stored
state must equal the live one.

    .venv/bin/python bench/state_writes.py [--users 200000] [--active 0.05] [--hours 2]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schemas.events import EventColumns, OrderColumns, TouchColumns, object_array  # noqa: E402
from udfs.journeys import Changes, JourneyBook, JourneyConfig  # noqa: E402

OVERLAY_SHARE = JourneyBook.overlay_share
from udfs.periods import DAY_MS  # noqa: E402

HOUR_MS = DAY_MS // 24
START = 1_790_812_800_000  # the live part's first hour
CHANNELS = np.array(["paid_search", "paid_social", "display", "email", "affiliate"],
                    dtype=object)


def batch(users: np.ndarray, ts: np.ndarray, is_order: np.ndarray, rng: np.random.Generator,
          first_order: int) -> EventColumns:
    names = object_array([f"user-{u:07d}" for u in users.tolist()])
    touch, order = ~is_order, is_order
    n_t, n_o = int(touch.sum()), int(order.sum())
    blank_t, blank_o = object_array([""] * n_t), object_array([""] * n_o)
    return EventColumns(
        TouchColumns(names[touch], ts[touch], CHANNELS[rng.integers(0, len(CHANNELS), n_t)],
                     blank_t, blank_t, blank_t),
        OrderColumns(names[order], ts[order],
                     object_array([f"order-{first_order + i}" for i in range(n_o)]),
                     np.full(n_o, 25.0), object_array(["USD"] * n_o), blank_o, blank_o))


class Store:
    """The operator's keyed state for one bucket, as bytes, with what was written."""

    def __init__(self) -> None:
        self.snapshot: bytes | None = None
        self.overlays: dict[int, bytes] = {}
        self.batches: dict[int, bytes] = {}
        self.progress = None
        self.written: Counter[str] = Counter()
        self.counting = False

    def apply(self, changes: Changes) -> None:
        written: Counter[str] = Counter()
        if changes.snapshot is not None:
            self.snapshot = pickle.dumps(changes.snapshot, 5)
            self.overlays.clear()
            written["snapshots"] += len(self.snapshot)
        if changes.overlay is not None:
            value = pickle.dumps(changes.overlay, 5)
            self.overlays[changes.overlay.seq] = value
            written["overlays"] += len(value)
        for key, events in changes.batches.items():
            self.batches[key] = pickle.dumps(events, 5)
            written["batches"] += len(self.batches[key])
        for key in changes.removed_batches:
            del self.batches[key]
        if changes.progress is not None:
            self.progress = changes.progress
        if self.counting:
            self.written.update(written)

    def restore(self, config: JourneyConfig) -> JourneyBook:
        return JourneyBook.restore(
            config, self.progress, pickle.loads(self.snapshot) if self.snapshot else None,
            [(key, pickle.loads(value)) for key, value in self.batches.items()],
            overlays=[pickle.loads(value) for value in self.overlays.values()])


def one_run(args: argparse.Namespace, overlays: bool) -> dict:
    # below 0: every compaction a whole snapshot
    JourneyBook.overlay_share = OVERLAY_SHARE if overlays else -1.0
    config = JourneyConfig(history_days=365, winback_days=90)
    rng = np.random.default_rng(args.seed)
    book, store = JourneyBook(config), Store()
    # the history: ~3 events a user over the year before, one in five an order
    n = args.users * 3
    users = rng.integers(0, args.users, n)
    ts = START - 365 * DAY_MS + np.sort(rng.integers(0, 365 * DAY_MS, n))
    is_order = rng.random(n) < 0.2
    order_no = 0
    for part in np.array_split(np.arange(n), 12):  # a month at a time
        late, changes = book.add(batch(users[part], ts[part], is_order[part], rng, order_no),
                                 -(2**63))
        order_no += int(is_order[part].sum())
        store.apply(changes)
        store.apply(book.advance(int(ts[part][-1])).changes)
    store.apply(book.compact())
    store.counting = True
    closed = compactions = 0
    started = time.process_time()
    step_ms = int(args.step_s * 1000)
    per_step = args.active * args.users * step_ms / DAY_MS  # events a step, on average
    for step in range(int(args.hours * HOUR_MS // step_ms)):
        k = int(rng.poisson(per_step))
        if k:
            who = rng.integers(0, args.users, k)
            at = START + step * step_ms + rng.integers(0, step_ms, k)
            order = rng.random(k) < 0.2
            _, changes = book.add(batch(who, at, order, rng, order_no), -(2**63))
            order_no += int(order.sum())
            store.apply(changes)
        advanced = book.advance(START + (step + 1) * step_ms)
        compactions += advanced.changes.compacted
        closed += len(advanced.closed)
        store.apply(advanced.changes)
    cpu = time.process_time() - started
    restored_at = time.perf_counter()
    restored = store.restore(config)
    restore_s = time.perf_counter() - restored_at
    same = pickle.dumps(_by_user(restored)) == pickle.dumps(_by_user(book))
    stored = len(store.snapshot or b"") + sum(map(len, store.overlays.values()))
    return {"written": dict(store.written), "compactions": compactions, "closed": closed,
            "cpu_s": cpu, "restore_s": restore_s, "restored_equal": same,
            "stored_book": stored, "users": len(book.users)}


def _by_user(book: JourneyBook) -> list:
    snap = book.snapshot()
    order = np.argsort(snap.rows, kind="stable")
    return [snap.users[i] for i in order.tolist()] + snap.last_order[order].tolist() \
        + snap.touch_counts[order].tolist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--active", type=float, default=0.05,
                        help="share of the users with an event in a day")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--step-s", type=float, default=1.0,
                        help="event time between watermark steps")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    runs = {name: one_run(args, overlays) for name, overlays in
            (("whole snapshots", False), ("overlays", True))}
    base = runs["whole snapshots"]
    total = {name: sum(run["written"].values()) for name, run in runs.items()}
    print(f"{args.users:,} users with a year's history; {args.hours:g} live hours, "
          f"{args.active:.1%} of the users active a day; a watermark step every "
          f"{args.step_s:g} s")
    print(f"{'compactions write':<18}{'compactions':>12}{'batches MB':>11}{'book MB':>9}"
          f"{'total MB':>10}{'ratio':>7}{'CPU s':>7}{'restore s':>10}{'stored MB':>10}")
    for name, run in runs.items():
        written = run["written"]
        book_mb = (written.get("snapshots", 0) + written.get("overlays", 0)) / 1e6
        print(f"{name:<18}{run['compactions']:>12}{written.get('batches', 0) / 1e6:>11.2f}"
              f"{book_mb:>9.2f}{total[name] / 1e6:>10.2f}"
              f"{total[name] / total['whole snapshots']:>7.2f}{run['cpu_s']:>7.1f}"
              f"{run['restore_s']:>10.2f}{run['stored_book'] / 1e6:>10.2f}")
    same = runs["overlays"]["closed"] == base["closed"] and all(
        run["restored_equal"] for run in runs.values())
    print("same journeys closed, each restore equal to its live book:", same)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
