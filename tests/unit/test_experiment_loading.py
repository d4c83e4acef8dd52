"""Loading the experiments topics keeps each user's earliest exposure to a flag, whatever
the order the rows arrive in (a user the job forgot and saw again is not re-assigned)."""

import json

from pipelines.store.warehouse import Warehouse


def exposure(user: str, variant: str, ms: int) -> bytes:
    return json.dumps({"flag_key": "f", "user_id": user, "variant": variant,
                       "first_exposure_ms": ms, "trace_id": ""}).encode()


def test_the_earliest_exposure_is_kept(tmp_path):
    with Warehouse(f"sqlite:///{tmp_path / 'w.db'}") as warehouse:
        warehouse.upsert_experiments([exposure("u1", "a", 100), exposure("u2", "b", 500)])
        # later: u1 again after the job's retention; u2's earlier exposure arrives late;
        # u3 twice in one batch
        warehouse.upsert_experiments([exposure("u1", "b", 900), exposure("u2", "a", 200),
                                      exposure("u3", "b", 70), exposure("u3", "a", 50)])
        rows = warehouse.query("SELECT user_id, variant, first_exposure_ms FROM "
                               "experiment_exposures ORDER BY user_id")
    assert rows == [("u1", "a", 100), ("u2", "a", 200), ("u3", "a", 50)]
