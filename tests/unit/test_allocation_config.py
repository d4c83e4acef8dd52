"""`roi.allocation_weights: ltv_segment` in the job config: it needs the allocation model's
message file, a bad file or a segment without a weight is an error naming the key, and a
good one reaches what every engine computes with."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.ltv.models_topic import ModelMessage
from pipelines.settings.job_config import ConfigError, load_config
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel

MODEL = LtvModel(BgNbd(r=0.5, alpha=5.0, a=0.8, b=2.4), GammaGamma(p=6.0, q=4.0, v=15.0),
                 period_days=7.0, customers=100.0, fitted_through_day=400.0)


def config_with(tmp_path: Path, roi: dict) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"roi": roi}))
    return path


def message_file(tmp_path: Path) -> Path:
    path = tmp_path / "allocation-model.json"
    path.write_text(ModelMessage(MODEL, 365, 0.0, (40.0, 80.0, 160.0)).to_json())
    return path


def test_the_allocation_model_reaches_the_computation(tmp_path):
    model = message_file(tmp_path)
    config = load_config(config_with(tmp_path, {
        "allocation_weights": "ltv_segment", "ltv_model": str(model),
        "segment_weights": {"low": 0.1, "mid": 0.2, "high": 0.3, "top": 0.4,
                            "unknown": 0.05}}))
    settings = config.computation
    assert settings.by_segment is not None and settings.by_segment.weights["top"] == 0.4
    assert settings.segmenter is not None and settings.segmenter.bounds == (40.0, 80.0, 160.0)
    assert load_config(config_with(tmp_path, {})).computation.by_segment is None


@pytest.mark.parametrize("roi, problem", [
    ({"allocation_weights": "ltv_segment"}, "roi.allocation_weights ltv_segment needs "
                                            "roi.ltv_model"),
    ({"allocation_weights": "ltv"}, "roi.allocation_weights must be one of"),
    ({"allocation_weights": "ltv_segment", "ltv_model": "missing.json"},
     "roi.ltv_model: cannot read the LTV model message missing.json"),
    ({"segment_weights": {"low": 1.0}}, "roi.segment_weights: .*'unknown'"),
])
def test_a_bad_allocation_setting_names_its_key(tmp_path, roi, problem):
    with pytest.raises(ConfigError, match=problem):
        load_config(config_with(tmp_path, roi))


def test_a_model_file_that_is_not_a_message_or_misses_a_weight_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"horizon_days": 365}')
    with pytest.raises(ConfigError, match=f"roi.ltv_model: {bad}: "):
        load_config(config_with(tmp_path, {"allocation_weights": "ltv_segment",
                                           "ltv_model": str(bad)}))
    with pytest.raises(ConfigError, match="give no weight to top"):
        load_config(config_with(tmp_path, {
            "allocation_weights": "ltv_segment", "ltv_model": str(message_file(tmp_path)),
            "segment_weights": {"low": 1.0, "mid": 1.0, "high": 1.0, "unknown": 0.1}}))
