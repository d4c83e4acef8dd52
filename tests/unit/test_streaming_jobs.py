"""The registry of streaming jobs (pipelines/flink/jobs.py): every command takes every job,
each job's builder, Flink name, topics and uids are what its module uses, and the topics
other configs and commands default to are the job config's."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from jobs.cli import build_parser
from jobs.demo import DEMO_STEPS, demo_job_name
from jobs.flink_entry import JOBS
from jobs.flink_entry import build_parser as entry_parser
from pipelines.control.config import load_control_config, parse_control_config
from pipelines.flink.jobs import (
    ATTRIBUTION,
    DEFAULT_JOB,
    STREAMING_JOBS,
    topic_settings,
    unique,
)
from pipelines.settings.job_config import ConfigError, StreamingJobConfig, load_config
from pipelines.settings.shared import with_overrides

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = {"attribution": "run_job", "gpu-cost": "run_gpu_job", "roi": "run_roi_job",
           "experiments": "run_experiments_job", "ltv": "run_ltv_job"}


def test_every_command_takes_every_job_and_the_same_default() -> None:
    assert list(STREAMING_JOBS) == ["attribution", "gpu-cost", "roi", "experiments", "ltv"]
    assert set(JOBS) == set(STREAMING_JOBS) and DEFAULT_JOB == "attribution"
    cli = build_parser()
    assert entry_parser().parse_args([]).job == DEFAULT_JOB
    assert cli.parse_args(["run"]).job == DEFAULT_JOB
    assert cli.parse_args(["cluster", "submit"]).job == DEFAULT_JOB
    for name in STREAMING_JOBS:
        assert entry_parser().parse_args(["--streaming-job", name]).job == name
        assert cli.parse_args(["run", "--job", name]).job == name
        assert cli.parse_args(["cluster", "submit", "--job", name]).job == name
    for argv in (["run", "--job", "nope"], ["cluster", "submit", "--job", "nope"]):
        with pytest.raises(SystemExit):
            cli.parse_args(argv)


def test_run_help_names_every_job() -> None:
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    assert helps["run"] == ("run a streaming job on Flink: attribution (default), gpu-cost, "
                            "roi, experiments or ltv")


@pytest.mark.parametrize("name", list(STREAMING_JOBS))
def test_builder_and_run_default_are_the_modules(name: str) -> None:
    job = STREAMING_JOBS[name]
    module_name, function = job.builder_path.split(":")
    module = importlib.import_module(module_name)
    assert job.builder() is getattr(module, function)
    run = getattr(module, RUNNERS[name])
    assert inspect.signature(run).parameters["job_name"].default == job.flink_name
    assert job.flink_name == f"seedance-{name}"


def test_local_cluster_and_flink_configuration_default_to_the_attribution_job() -> None:
    from pipelines.flink.runtime.cluster import LocalFlinkCluster
    from pipelines.flink.runtime.kafka import flink_configuration

    for function in (LocalFlinkCluster.environment, flink_configuration):
        assert inspect.signature(function).parameters["job_name"].default == \
            ATTRIBUTION.flink_name


@pytest.mark.parametrize("name", list(STREAMING_JOBS))
def test_topics_are_job_config_attributes(name: str) -> None:
    job, config = STREAMING_JOBS[name], StreamingJobConfig()
    assert job.reads and job.writes
    topics = job.topics(config)
    assert topics and all(isinstance(t, str) and t for t in topics)
    described = job.describe(config)
    assert "{" not in described
    assert set(re.findall(r"[a-z_]+", described)) - {"dead", "letters", "late"} <= set(topics)
    renamed = config.replace("topics", spans="s2", credits="c2", conversions="o2")
    assert set(job.topics(renamed)) & {"s2", "c2", "o2"}  # read from the config given


def test_run_ensures_the_topics_it_always_did() -> None:
    config = StreamingJobConfig()
    base = ["otlp_spans", "attribution_credits", "otlp_spans_dlq", "late_events", "conversions",
            "run_accounting"]
    expected = {"attribution": base,
                "gpu-cost": base + ["otlp_metrics", "gpu_costs", "otlp_metrics_dlq"],
                "roi": base + ["ad_spend", "gpu_costs", "roi_daily", "roi_inputs_dlq"],
                "experiments": base + ["experiment_exposures", "experiment_conversions"],
                "ltv": base + ["ltv_models", "customer_ltv", "ltv_inputs_dlq"]}
    for name, job in STREAMING_JOBS.items():
        assert unique(ATTRIBUTION.topics(config) + job.topics(config)) == expected[name]
    # topics read as the latest message per key are created compacted
    compact = {"cleanup.policy": "compact"}
    assert topic_settings(STREAMING_JOBS.values(), config) == {
        "ltv_models": compact, "customer_ltv": compact}
    renamed = config.replace("topics", customer_ltv="ltv_v2")
    assert STREAMING_JOBS["ltv"].topic_settings(renamed) == {"ltv_models": compact,
                                                              "ltv_v2": compact}
    assert all(not job.topic_settings(config) for job in STREAMING_JOBS.values()
               if job.name != "ltv")
    assert [job.name for job in STREAMING_JOBS.values() if job.keeps_accounting] == \
        ["attribution"]


def _uids_in(module: str) -> tuple[set[str], list[re.Pattern[str]]]:
    """The uids a job module gives its operators: `.uid(...)` and from_kafka's and
    grouped's last argument, constants as they are and f-strings as patterns."""
    path = ROOT / (module.replace(".", "/") + ".py")
    constants, patterns = set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "uid":
            arg = node.args[0]
        elif isinstance(func, ast.Name) and func.id == "from_kafka" and len(node.args) == 5:
            arg = node.args[4]
        elif isinstance(func, ast.Name) and func.id == "grouped" and len(node.args) == 4:
            arg = node.args[3]
        else:
            continue
        if isinstance(arg, ast.Constant):
            constants.add(arg.value)
        elif isinstance(arg, ast.JoinedStr):
            patterns.append(re.compile("".join(
                re.escape(part.value) if isinstance(part, ast.Constant) else ".+"
                for part in arg.values)))
    return constants, patterns


@pytest.mark.parametrize("name", list(STREAMING_JOBS))
def test_uids_are_the_ones_its_module_gives(name: str) -> None:
    job = STREAMING_JOBS[name]
    constants, patterns = _uids_in(job.builder_path.split(":")[0])
    assert constants <= set(job.uids), "a uid of the module is missing from the registry"
    for uid in set(job.uids) - constants:
        assert any(p.fullmatch(uid) for p in patterns), f"{uid} is not the module's"
    for pattern in patterns:
        assert any(pattern.fullmatch(uid) for uid in job.uids), pattern.pattern
    assert len(set(job.uids)) == len(job.uids)


def test_the_demo_runs_every_job_under_its_own_names() -> None:
    assert set(DEMO_STEPS) == set(STREAMING_JOBS)
    assert [demo_job_name(job) for job in STREAMING_JOBS.values()] == [
        "seedance-demo", "seedance-demo-gpu-cost", "seedance-demo-roi",
        "seedance-demo-experiments", "seedance-demo-ltv"]


def test_cli_topic_defaults_are_the_job_configs(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`generate` and `probe` publish to the topics of `--config` (the shipped names
    without it), unless `--topic` names one."""
    import yaml

    from jobs.cli import main
    from pipelines.kafka import io
    from pipelines.sources import publish

    sent: list[str] = []
    monkeypatch.setattr(publish, "publish_plan", lambda plan, bootstrap, topic, **_: (
        sent.append(topic), 0)[1])

    class Producer:
        def send(self, topic: str, value: bytes) -> Producer:
            sent.append(topic)
            return self

        def get(self, timeout: float) -> None:
            return None

        def close(self) -> None:
            return None

    monkeypatch.setattr(io, "producer", lambda *args, **kwargs: Producer())
    recording = tmp_path / "samples.jsonl"
    assert main(["generate", "--users", "20", "--days", "2", "--bootstrap", "k:1",
                 "--gpu-recording", str(recording)]) == 0
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"topics": {"spans": "spans_v2"},
                                      "gpu": {"metrics_topic": "metrics_v2"}}))
    for command in (["generate", "--users", "2", "--days", "2"],
                    ["probe", "--replay", str(recording)]):
        assert main([*command, "--bootstrap", "k:1", "--config", str(config)]) == 0
        assert main([*command, "--bootstrap", "k:1", "--config", str(config),
                     "--topic", "mine"]) == 0
    assert sent[0] == load_config().topics.spans == "otlp_spans"
    assert set(sent[1:3]) == {"spans_v2", "mine"}
    assert {t for t in sent[3:] if t != "mine"} == {"metrics_v2"} and "mine" in sent[3:]


def test_the_control_loop_reads_the_job_configs_topics_unless_it_names_its_own() -> None:
    job = StreamingJobConfig().replace("topics", roi="roi_v2")
    job = job.replace("gpu", metrics_topic="metrics_v2")
    inputs = load_control_config(job=job).inputs
    assert (inputs.roi_topic, inputs.metrics_topic, inputs.alerts_topic) == \
        ("roi_v2", "metrics_v2", "alerts")
    own = parse_control_config({"inputs": {"roi_topic": "mine"}}, job).inputs
    assert (own.roi_topic, own.metrics_topic) == ("mine", "metrics_v2")
    assert parse_control_config({"inputs": None}, job).inputs.roi_topic == "roi_v2"
    shipped = load_control_config().inputs  # no job config: its defaults
    assert (shipped.roi_topic, shipped.metrics_topic) == ("roi_daily", "otlp_metrics")


def test_environment_overrides_go_in_before_the_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SEEDANCE_WAREHOUSE_URL", "sqlite:////tmp/env.db")
    path = tmp_path / "job.yaml"
    path.write_text("warehouse:\n")  # an empty section: the variable still lands
    assert load_config(path).warehouse.url == "sqlite:////tmp/env.db"
    path.write_text("warehouse: here\n")
    with pytest.raises(ConfigError, match=r"job.yaml: warehouse must be a mapping"):
        load_config(path)
    data = {"warehouse": {"url": "sqlite:///file.db"}}
    assert with_overrides(data, [(("warehouse", "url"), "SEEDANCE_WAREHOUSE_URL")]) == \
        {"warehouse": {"url": "sqlite:////tmp/env.db"}}
    assert data == {"warehouse": {"url": "sqlite:///file.db"}}  # the caller's is untouched
    monkeypatch.setenv("SEEDANCE_CONTROL_WEBHOOK_SECRET", "k")
    executors = {"webhook": {"url": "https://hooks.example"}}
    assert parse_control_config({"executors": executors}).executors.webhook.secret
    assert executors == {"webhook": {"url": "https://hooks.example"}}
