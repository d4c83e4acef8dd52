"""The stored forms of a journey book keep the module name their pickles record.

Snapshot and Progress were defined in udfs.journey_book before they moved to
udfs/journeys/state.py; engines keep them pickled in their state (a pickle names a class by
module and name), so they must still pickle as udfs.journey_book's: state stored by an
earlier version then loads, and state stored now loads in an earlier version."""

from __future__ import annotations

import pickle
import pickletools

import numpy as np

from schemas.events import events_of
from schemas.records import Conversion, Touchpoint
from udfs.journeys import book as journey_book
from udfs.journeys import state as journey_state
from udfs.journeys.rules import JourneyConfig

CFG = JourneyConfig(lookback_days=30, history_days=120, winback_days=90)
HOUR_MS = 3_600_000


def _globals(payload: bytes) -> list[str]:
    """The strings a pickle names classes with (module, then name)."""
    return [str(arg) for op, arg, _ in pickletools.genops(payload)
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "GLOBAL")]


def test_snapshot_and_progress_pickle_under_their_old_module() -> None:
    events = [Touchpoint(f"u{u}", (u * 7 + k) * HOUR_MS, ("email", "ads")[k % 2], f"c{k}",
                         f"t{u}-{k}", "") for u in range(6) for k in range(u % 3)]
    events.append(Conversion("u4", 40 * HOUR_MS, "o4", 12.0, "USD", "tr4", ""))
    book = journey_book.JourneyBook(CFG)
    book.add(events_of(events), -(2**62))
    book.advance(45 * HOUR_MS)
    for value in (book.snapshot(), journey_book.Progress(5, (6, 7))):
        payload = pickle.dumps(value, 5)
        names = _globals(payload)
        assert "udfs.journey_book" in names
        assert not {"udfs.journeys.book", "udfs.journeys.state", "udfs.journey_state"} & set(names)
        assert type(value).__name__ in names
        loaded = pickle.loads(payload)
        assert type(loaded) is type(value)
        if isinstance(value, journey_state.Snapshot):
            for mine, theirs in zip(value, loaded, strict=True):
                assert np.array_equal(np.asarray(mine, object), np.asarray(theirs, object))
        else:
            assert loaded == value
    assert journey_book.Snapshot is journey_state.Snapshot
    assert journey_book.Progress is journey_state.Progress


def test_a_restored_snapshot_steps_as_the_book_it_was_taken_from() -> None:
    events = [Touchpoint(f"u{u}", u * HOUR_MS, "email", "c", f"t{u}", "") for u in range(8)]
    events += [Conversion("u3", 10 * HOUR_MS, "o3", 5.0, "USD", "", "")]
    book = journey_book.JourneyBook(CFG)
    book.add(events_of(events), -(2**62))
    book.advance(5 * HOUR_MS)
    restored = journey_book.JourneyBook.restore(
        CFG, journey_book.Progress(5 * HOUR_MS), pickle.loads(pickle.dumps(book.snapshot())),
        [(batch_id, batch) for batch_id, batch in book.batches.items()])
    assert restored.next_due() == book.next_due()
    end = 10**13
    mine, theirs = book.advance(end).closed, restored.advance(end).closed
    assert mine.converted.order_id.tolist() == theirs.converted.order_id.tolist() == ["o3"]
    assert mine.lapsed.user_id.tolist() == theirs.lapsed.user_id.tolist()
