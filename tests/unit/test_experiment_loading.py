"""Loading the experiments topics keeps each user's earliest exposure to a flag, whatever
the order the rows arrive in (a user the job forgot and saw again is not re-assigned)."""

import json

from pipelines.store.sinks import ExperimentsSink
from pipelines.store.warehouse import Warehouse


def exposure(user: str, variant: str, ms: int) -> bytes:
    return json.dumps({"flag_key": "f", "user_id": user, "variant": variant,
                       "first_exposure_ms": ms, "trace_id": ""}).encode()


def test_the_earliest_exposure_is_kept(tmp_path):
    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        sink = ExperimentsSink(warehouse)
        sink.write([exposure("u1", "a", 100), exposure("u2", "b", 500)])
        # later: u1 again after the job's retention; u2's earlier exposure arrives late;
        # u3 twice in one batch
        sink.write([exposure("u1", "b", 900), exposure("u2", "a", 200),
                    exposure("u3", "b", 70), exposure("u3", "a", 50)])
        rows = warehouse.query("SELECT user_id, variant, first_exposure_ms FROM "
                               "experiment_exposures ORDER BY user_id")
    assert rows == [("u1", "a", 100), ("u2", "a", 200), ("u3", "a", 50)]


def test_recomputed_results_and_intervals_replace_their_partition(tmp_path):
    import pandas as pd

    from pipelines.store.experiments import store_results
    from pipelines.store.intervals import store_intervals
    from udfs.experiments.statistics import STATS_COLUMNS

    def stats(variants):
        rows = []
        for variant in variants:
            row = dict.fromkeys(STATS_COLUMNS, 0.0)
            row.update(flag_key="f", variant=variant, window_end="2026-10-07",
                       window_start="2026-10-01", is_control=variant == "control",
                       control_variant="control", significant=False, srm=False,
                       users=10, converters=1, conversions=1, confidence=0.95,
                       heavy_tail=False, note="")
            rows.append(row)
        return pd.DataFrame(rows, columns=STATS_COLUMNS)

    def intervals(channels):
        row = {name: 1.0 for name in ("credit", "credit_low", "credit_high", "revenue",
                                      "revenue_low", "revenue_high", "share", "share_low",
                                      "share_high")}
        return pd.DataFrame([{"model": "linear", "conversion_date": "2026-10-01",
                              "channel": c, **row, "resamples": 100} for c in channels])

    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        store_results(warehouse, stats(["control", "a", "b"]))
        store_results(warehouse, stats(["control", "a"]))  # b is gone from the data
        store_intervals(warehouse, intervals(["email", "display"]), 0.95, 0)
        store_intervals(warehouse, intervals(["email"]), 0.95, 0)
        variants = warehouse.query("SELECT variant FROM experiment_results ORDER BY variant")
        channels = warehouse.query("SELECT channel FROM credit_intervals")
    assert variants == [("a",), ("control",)] and channels == [("email",)]
