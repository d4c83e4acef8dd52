"""docker-compose.yml, its Dockerfile and entry point, checked without a Docker engine: the
services and how they depend on each other, images, ports, volumes, health checks, secrets,
and the job submission, against the project's own files (job config, CLI, jar POM)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.cli import build_parser
from pipelines.reconcile.config import load_reconcile_config
from pipelines.settings.job_config import load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "jobs" / "setup" / "docker-entrypoint.sh"
IMAGE = "seedance-roi:latest"
APP = "/app/"  # where the Dockerfile puts the repository


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def properties(text: str) -> dict[str, str]:
    """FLINK_PROPERTIES lines -> {key: value}."""
    return dict(line.split(": ", 1) for line in text.strip().splitlines())


def repo_path(container_path: str) -> Path:
    assert container_path.startswith(APP), container_path
    return ROOT / container_path.removeprefix(APP)


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_stack_has_every_piece(services: dict[str, dict[str, Any]]) -> None:
    assert {"kafka", "kafka-topics", "jobmanager", "taskmanager", "submit-attribution",
            "postgres", "loader", "dashboard", "reconcile"} <= set(services)
    assert not any("zookeeper" in name for name in services)
    for name in ("jobmanager", "taskmanager", "submit-attribution", "loader", "dashboard",
                 "reconcile"):
        assert services[name]["image"] == IMAGE and services[name]["build"] == ".", name
    assert services["postgres"]["image"].startswith("postgres:")
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", services["kafka"]["image"])


def test_kafka_runs_kraft_with_consistent_listeners(services: dict[str, dict[str, Any]]) -> None:
    env = services["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    listeners = {item.split("://")[0] for item in env["KAFKA_LISTENERS"].split(",")}
    advertised = {item.split("://")[0] for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    protocols = dict(item.split(":") for item in
                     env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert advertised <= listeners and listeners <= set(protocols)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    # the job's exactly-once sinks open transactions this long; the broker must allow it
    job = load_config(repo_path(option(services["submit-attribution"]["command"], "--config")))
    assert int(env["KAFKA_TRANSACTION_MAX_TIMEOUT_MS"]) >= job.flink.transaction_timeout_s * 1000
    assert env["KAFKA_ADVERTISED_LISTENERS"].split(",")[0].endswith("//kafka:9092")
    assert services["loader"]["environment"]["SEEDANCE_KAFKA_BOOTSTRAP"] == "kafka:9092"


def test_every_topic_is_created_with_log_append_time(services: dict[str, dict[str, Any]]
                                                     ) -> None:
    script = " ".join(services["kafka-topics"]["command"])
    created = set(re.search(r"for topic in (.*?); do", script, re.S).group(1).split())
    assert "message.timestamp.type=LogAppendTime" in script and "--if-not-exists" in script
    job = load_config(repo_path(option(services["submit-attribution"]["command"], "--config")))
    needed = {getattr(job.topics, name) for name in job.topics.__dataclass_fields__}
    needed |= {job.gpu.metrics_topic, job.gpu.metrics_dead_letter, job.gpu.costs_topic,
               load_reconcile_config(None).alerts.topic}
    assert needed <= created, needed - created


def test_flink_cluster_and_shared_state(services: dict[str, dict[str, Any]],
                                        compose: dict[str, Any]) -> None:
    jm, tm = services["jobmanager"], services["taskmanager"]
    assert (jm["command"], tm["command"]) == ("jobmanager", "taskmanager")
    jm_props = properties(jm["environment"]["FLINK_PROPERTIES"])
    tm_props = properties(tm["environment"]["FLINK_PROPERTIES"])
    assert jm_props["jobmanager.rpc.address"] == tm_props["jobmanager.rpc.address"] == \
        "jobmanager"
    job = load_config(repo_path(option(services["submit-attribution"]["command"], "--config")))
    assert int(tm_props["taskmanager.numberOfTaskSlots"]) >= job.flink.parallelism
    # rescaling from a savepoint needs the same max parallelism the state was written with:
    # set where the job graph is built, on the submitting client
    submit = services["submit-attribution"]["command"]
    max_parallelism = next(int(a.split("=")[1]) for a in submit
                           if a.startswith("-Dpipeline.max-parallelism="))
    assert job.flink.parallelism <= max_parallelism
    checkpoints = job.flink.checkpoint_dir.removeprefix("file://")
    savepoints = jm_props["execution.checkpointing.savepoint-dir"].removeprefix("file://")
    for service in (jm, tm):  # both processes must see the same checkpoint files
        mounts = dict(v.split(":")[::-1] for v in service["volumes"])
        assert mounts[checkpoints] == "checkpoints" and mounts[savepoints] == "savepoints"
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in declared or source.startswith(("/", "${")), (name, volume)


def test_the_job_is_submitted_with_flink_run_python(services: dict[str, dict[str, Any]]
                                                   ) -> None:
    submit = services["submit-attribution"]
    command = submit["command"]
    assert command[:2] == ["flink", "run"] and "--detached" in command
    assert option(command, "--jobmanager") == "jobmanager:8081"
    assert "8081" in " ".join(services["jobmanager"]["ports"])
    entry = repo_path(option(command, "--python"))
    assert entry == ROOT / "jobs" / "flink_entry.py" and entry.exists()
    # the job's jars (the connector the project's POM pins and the job's own JVM classes)
    # are shipped by flink_entry.py from SEEDANCE_JARS/flink: where the Dockerfile puts them
    assert "--jarfile" not in command
    dockerfile = DOCKERFILE.read_text()
    jars = re.search(r"SEEDANCE_JARS=(\S+)", dockerfile).group(1)
    assert f"COPY --from=jars /jars/flink/ {jars}/flink/" in dockerfile
    assert "mvn --batch-mode --quiet -f jvm/pom.xml -Dout=/jars/flink package" in dockerfile
    # the embedded Python (pemja) from the cluster's lib/, for every job a TaskManager runs
    assert "opt/flink-python-" in dockerfile
    load_config(repo_path(option(command, "--config")))  # a valid job config (keys, types)
    assert submit["depends_on"] == {
        "jobmanager": {"condition": "service_healthy"},
        "taskmanager": {"condition": "service_healthy"},
        "kafka-topics": {"condition": "service_completed_successfully"}}
    assert submit["restart"] == "no"


def test_dependencies_health_checks_and_ports(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)
            if spec["condition"] == "service_completed_successfully":
                assert services[dependency]["restart"] == "no", (name, dependency)
        if service.get("restart") == "unless-stopped":
            check = service["healthcheck"]
            assert check["test"][0] == "CMD" and check["retries"] > 0, name
        for port in service.get("ports", []):
            # published on loopback only: nothing of the stack is open to the network as is
            assert port.startswith("127.0.0.1:"), (name, port)
    assert services["dashboard"]["healthcheck"]["test"][-1].endswith("/healthz")
    assert services["postgres"]["healthcheck"]["test"][1] == "pg_isready"


def test_secrets_are_files_never_values(compose: dict[str, Any],
                                        services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET", key):
                assert key.endswith("_FILE"), (name, key)
                secret = value.removeprefix("/run/secrets/")
                assert secret in service["secrets"] and secret in compose["secrets"], name
            assert "@" not in str(value) or ":" not in str(value).split("@")[0].split("//")[-1], \
                f"{name}.{key} carries a password in a URL"
    for secret in compose["secrets"].values():
        assert not secret["file"].startswith((".", "/app")), "secrets live outside the repo"


def test_commands_are_valid_seedance_invocations(services: dict[str, dict[str, Any]]) -> None:
    parser = build_parser()
    for name in ("loader", "dashboard"):
        command = services[name]["command"]
        assert command[0] == "seedance"
        args = parser.parse_args(command[1:])
        assert args.command == command[1]
    dashboard = parser.parse_args(services["dashboard"]["command"][1:])
    assert dashboard.host == "0.0.0.0" and str(dashboard.port) in \
        services["dashboard"]["ports"][0].split(":")
    reconcile = services["reconcile"]
    full = reconcile["entrypoint"][1:] + reconcile["command"]
    assert full[:2] == ["seedance", "reconcile"]
    parser.parse_args(full[1:])
    assert reconcile["profiles"] == ["batch"]  # a batch job: run by a scheduler, not `up`


def test_dockerfile_builds_what_compose_runs() -> None:
    text = DOCKERFILE.read_text()
    python = re.search(r"^FROM python:(\d+\.\d+)", text, re.M).group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={python}' in pyproject
    assert f"FLINK_HOME=/usr/local/lib/python{python}/site-packages/pyflink" in text
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), path
    assert 'ENTRYPOINT ["/app/jobs/setup/docker-entrypoint.sh"]' in text
    assert os.access(ENTRYPOINT, os.X_OK)
    assert re.search(r"^USER (?!root)\w+", text, re.M)  # the processes do not run as root
    assert "openjdk-17-jre-headless" in text


def test_entrypoint_turns_properties_into_flags_and_reads_secret_files(
        tmp_path: Path, services: dict[str, dict[str, Any]]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for role in ("jobmanager", "taskmanager"):
        stub = bin_dir / f"{role}.sh"
        stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$0" "$@"\n')
        stub.chmod(0o755)
    secret = tmp_path / "warehouse_password"
    secret.write_text("s3cret-value\n")
    env = {"PATH": os.environ["PATH"], "FLINK_HOME": str(tmp_path),
           "FLINK_PROPERTIES": services["jobmanager"]["environment"]["FLINK_PROPERTIES"],
           "PGPASSWORD_FILE": str(secret)}
    out = subprocess.run([str(ENTRYPOINT), "jobmanager"], env=env, capture_output=True,
                         text=True, check=True)
    args = out.stdout.splitlines()
    assert args[:2] == [str(bin_dir / "jobmanager.sh"), "start-foreground"]
    flags = [args[i + 1] for i, a in enumerate(args) if a == "-D"]
    assert "jobmanager.rpc.address=jobmanager" in flags
    assert "execution.checkpointing.savepoint-dir=file:///savepoints" in flags
    assert "rest.bind-address=0.0.0.0" in flags
    assert "s3cret" not in out.stdout + out.stderr
    shown = subprocess.run([str(ENTRYPOINT), "bash", "-c",
                            'echo "${#PGPASSWORD} ${PGPASSWORD_FILE:-gone}"'], env=env,
                           capture_output=True, text=True, check=True)
    assert shown.stdout.split() == [str(len("s3cret-value")), "gone"]
    missing = subprocess.run([str(ENTRYPOINT), "true"], env={**env, "PGPASSWORD_FILE": "/nope"},
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "unreadable" in missing.stderr


def test_operations_doc_names_every_operator_uid() -> None:
    """Savepoint upgrades depend on these uids; the runbook's table must stay complete."""
    doc = (ROOT / "docs" / "operations.md").read_text()
    for job in ("attribution_job.py", "gpu_cost_job.py", "roi_job.py", "experiments_job.py"):
        code = (ROOT / "pipelines" / "flink" / job).read_text()
        uids = re.findall(r'\.uid\(f?"([^"{]+)', code)
        assert uids, job
        for uid in uids:
            assert f"`{uid}" in doc, f"{job}: uid {uid} missing from docs/operations.md"
