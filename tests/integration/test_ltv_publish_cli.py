"""`seedance ltv fit --publish` on the CDNOW sample: the model the command fitted and wrote
is the one the ltv_models topic then holds (what the streaming job scores with), with the
job config's horizon and segment bounds from the customers' predicted LTV."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import yaml

from jobs.cli import main
from pipelines.kafka.io import read_all
from pipelines.ltv.models_topic import KEY, latest_model
from pipelines.ltv.transactions import read_cdnow
from udfs.ltv.model import LtvModel, summaries_from_transactions

CDNOW = Path(__file__).resolve().parents[1] / "fixtures" / "cdnow" / "CDNOW_sample.txt"


def test_fit_publishes_the_model_it_wrote(kafka, job_config, tmp_path, capsys):
    config = job_config.replace("topics", ltv_models=f"{job_config.topics.spans}-ltv-models")
    config = config.replace("ltv", horizon_days=180)
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dataclasses.asdict(config)))
    out = tmp_path / "model.json"
    assert main(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                 "--end", "1997-09-30", "--out", str(out), "--publish", "--config",
                 str(config_file), "--bootstrap", kafka]) == 0
    assert f"published to {config.topics.ltv_models}" in capsys.readouterr().out
    written = LtvModel.from_json(out.read_text())
    published = latest_model(kafka, config.topics.ltv_models)
    assert published is not None and published.model == written
    assert published.horizon_days == 180 and published.discount_rate == 0.0
    # the bounds: the 50/80/95 % quantiles of the customers' predicted LTV over 180 days
    ids, summaries = summaries_from_transactions(*read_cdnow(CDNOW), end_day=written
                                                 .fitted_through_day, period_days=7.0)
    value = written.lifetime_value(summaries, 180 / 7.0)
    assert np.allclose(published.bounds, np.quantile(value, (0.5, 0.8, 0.95)), rtol=1e-9)
    # one message, keyed for compaction
    (key, value_bytes), = list(read_all(kafka, config.topics.ltv_models))
    assert key == KEY.encode() and json.loads(value_bytes)["horizon_days"] == 180
