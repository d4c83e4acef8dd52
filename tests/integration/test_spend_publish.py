"""`seedance spend publish` on the real broker: every record keyed by what a restatement
replaces (platform, account, campaign, day), so that a restated day and the record it
replaces land in one partition, in order, whatever the topic's partition count."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.cli import main
from pipelines.kafka.io import read_all


def test_spend_records_are_keyed_by_what_a_restatement_replaces(kafka, topic, tmp_path: Path):
    spend = topic("spend", 4)
    path = tmp_path / "spend.csv"
    path.write_text("platform,account,campaign,day,amount,currency\n"
                    "meta,act_1,spring,2026-10-01,10,USD\n"
                    "google_ads,9,brand,2026-10-01,20,USD\n"
                    "meta,act_1,spring,2026-10-02,30,USD\n"
                    "meta,act_1,spring,2026-10-01,12.5,USD\n")  # a restatement of the first
    assert main(["spend", "publish", str(path), "--bootstrap", kafka, "--topic", spend]) == 0
    records = [(json.loads(key), json.loads(value)) for key, value in read_all(kafka, spend)]
    assert len(records) == 4
    assert all(key == [row["platform"], row["account"], row["campaign"], row["day"]]
               for key, row in records)
    restated = [row["amount"] for key, row in records
                if key == ["meta", "act_1", "spring", "2026-10-01"]]
    assert restated == [10.0, 12.5]  # one partition: in the order published
