"""`seedance load --follow` (the deployment's loader) keeps every result topic loaded, not
only the credits: ROI rows and experiment rows published while it runs reach the
warehouse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

from pipelines.kafka.io import ensure_topics, producer
from pipelines.store.warehouse import Warehouse


def test_follow_loads_roi_and_experiments_as_they_arrive(kafka, job_config, tmp_path):
    topics = job_config.topics
    ensure_topics(kafka, [topics.credits, topics.roi, topics.ad_spend,
                          topics.experiment_exposures, topics.experiment_conversions,
                          job_config.gpu.costs_topic])
    url = f"sqlite:///{tmp_path / 'wh.db'}"
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "topics": {"credits": topics.credits, "roi": topics.roi, "ad_spend": topics.ad_spend,
                   "experiment_exposures": topics.experiment_exposures,
                   "experiment_conversions": topics.experiment_conversions},
        "gpu": {"costs_topic": job_config.gpu.costs_topic}, "warehouse": {"url": url}}))
    loader = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "load", "--follow", "--config", str(config),
         "--bootstrap", kafka], env={**os.environ}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(3)
        out = producer(kafka)
        out.send(topics.roi, json.dumps({
            "kind": "roi", "model": "last_click", "day": "2026-10-01", "dimension": "channel",
            "key": "email", "conversions": 2.0, "revenue": 20.0, "ad_spend": 5.0,
            "compute_cost": 0.0, "roi": 4.0, "currency": "USD"}).encode()).get(30)
        out.send(topics.experiment_exposures, json.dumps({
            "flag_key": "f", "user_id": "u1", "variant": "a", "first_exposure_ms": 1,
            "trace_id": ""}).encode()).get(30)
        out.close()
        deadline = time.monotonic() + 40
        found = ([], [])
        while time.monotonic() < deadline and not all(found):
            time.sleep(1)
            with Warehouse(url) as warehouse:
                found = (warehouse.query("SELECT roi FROM roi_daily"),
                         warehouse.query("SELECT variant FROM experiment_exposures"))
        assert found == ([(4.0,)], [("a",)]), loader.poll()
    finally:
        loader.terminate()
        loader.wait(30)
