"""The ROI job's item kinds (pipelines/flink/roi/support.py ItemKind): named once, each its
own, and their values -- what checkpoints and dead letters hold -- never changed."""

from __future__ import annotations

import json
import pickle

from pipelines.flink.roi.compute import ShareIdleCost
from pipelines.flink.roi.support import ItemKind, retired_letter
from tests.flink_fakes import Harness, StateStore, Timers
from udfs.periods import day_end_ms

STORED = {"CREDIT": "credit", "TRACE_CLAIM": "claim", "TRACE_COST": "cost", "SPEND": "spend",
          "GPU_CALL_COST": "gpu_call", "IDLE_TO_SHARE": "gpu_idle",
          "ORDER_COMPUTE": "compute", "UNLINKED": "unlinked", "UNSHARED_IDLE": "idle_gpu",
          "ORDER": "order", "ORDER_SEGMENT": "segment"}


def test_the_kinds_keep_their_stored_values_and_are_plain_strings():
    kinds = {name: value for name, value in vars(ItemKind).items() if name.isupper()}
    assert kinds == STORED
    assert len(set(kinds.values())) == len(kinds)
    for value in kinds.values():  # pickled as a str, as before the names
        assert type(value) is str and pickle.loads(pickle.dumps(value)) == value


def test_idle_to_share_and_unshared_idle_are_the_two_sides_of_sharing():
    """A GPU-day's idle cost goes in as IDLE_TO_SHARE; with no call to share it, what comes
    out is UNSHARED_IDLE for the day, under the GPU's id."""
    timers = Timers()
    harness = Harness(ShareIdleCost(None), StateStore(), timers)
    day, at = "2026-10-01", 1_790_000_000_000
    key = f"GPU-1\t{day}"
    assert harness.process((ItemKind.IDLE_TO_SHARE, key, at, 2.5), key=key) == []
    timers.watermark = day_end_ms(day)
    out = [item for timestamp, _ in timers.due() for item in harness.on_timer(timestamp, key)]
    assert [(kind, payload) for kind, _, _, payload in out] == [
        (ItemKind.UNSHARED_IDLE, ("GPU-1", 2.5))]


def test_a_retired_letter_names_the_stored_kind():
    letter = json.loads(retired_letter("roi", ItemKind.UNSHARED_IDLE, "2026-10-01",
                                       ("GPU-1", 1.0)))
    assert letter["reason"] == "state_retired" and "idle_gpu input" in letter["detail"]
