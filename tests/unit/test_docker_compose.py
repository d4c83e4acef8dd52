"""docker-compose.yml, its Dockerfile and entry point, checked without a Docker engine: the
services and how they depend on each other, images, ports, volumes, health checks, secrets,
Kafka's listeners, the Collector and the submission of the four streaming jobs, against the
project's own files (job config, CLI, Flink entry point, jar POM, Collector docs)."""

from __future__ import annotations

import argparse
import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.cli import build_parser
from jobs.flink_entry import JOBS
from jobs.flink_entry import build_parser as entry_parser
from pipelines.flink.jobs import STREAMING_JOBS, topic_settings
from pipelines.reconcile.config import load_reconcile_config
from pipelines.settings.job_config import StreamingJobConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "jobs" / "setup" / "docker-entrypoint.sh"
OPERATIONS = ROOT / "docs" / "operations.md"
COLLECTOR_BUILD = ROOT / "jobs" / "setup" / "otelcol-builder.yaml"
IMAGE = "seedance-roi:latest"
APP = "/app/"  # where the Dockerfile puts the repository
# where the contrib image's default command reads its configuration
COLLECTOR_CONFIG = "/etc/otelcol-contrib/config.yaml"
LOOPBACK = {"127.0.0.1", "localhost"}


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


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` (KAFKA_LISTENERS, KAFKA_ADVERTISED_LISTENERS) -> {name: (host,
    port)}; the host is empty where the listener binds every interface."""
    found: dict[str, tuple[str, int]] = {}
    for item in spec.split(","):
        name, address = item.split("://")
        host, port = address.rsplit(":", 1)
        found[name] = (host, int(port))
    return found


def published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    """`host_ip:host_port:container_port` entries -> {container port: (host ip, host port)}."""
    found: dict[int, tuple[str, int]] = {}
    for entry in service.get("ports", []):
        host_ip, host_port, container_port = entry.split(":")
        found[int(container_port)] = (host_ip, int(host_port))
    return found


def entry_arguments(command: list[str]) -> argparse.Namespace:
    """What jobs/flink_entry.py makes of the arguments after `--python FILE` (the Flink
    client passes them on untouched), with the config's path on this machine."""
    script_at = command.index("--python") + 2
    args = entry_parser().parse_args(command[script_at:])
    args.config = repo_path(str(args.config))
    return args


@pytest.fixture(scope="module")
def submits(services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """{streaming job: the `flink run` command of the service that submits it}."""
    found: dict[str, list[str]] = {}
    for service in services.values():
        command = service.get("command")
        if isinstance(command, list) and command[:2] == ["flink", "run"]:
            job = entry_arguments(command).job
            assert job not in found, f"{job} is submitted twice"
            found[job] = command
    return found


@pytest.fixture(scope="module")
def job_configs(submits: dict[str, list[str]]) -> dict[str, StreamingJobConfig]:
    return {job: load_config(entry_arguments(command).config)
            for job, command in submits.items()}


def inter_broker_listener(env: dict[str, str]) -> str:
    return env.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT")  # Kafka's default


def kafka_internal(services: dict[str, dict[str, Any]]) -> str:
    """The address the broker advertises on its inter-broker listener: the one for clients
    on the compose network."""
    env = services["kafka"]["environment"]
    host, port = listeners(env["KAFKA_ADVERTISED_LISTENERS"])[inter_broker_listener(env)]
    return f"{host}:{port}"


@pytest.fixture(scope="module")
def collector_config(services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Collector's configuration file, as mounted from the repository."""
    mounts = dict(v.split(":")[1::-1] for v in services["otel-collector"]["volumes"])
    source = mounts[COLLECTOR_CONFIG]
    assert source.startswith("./"), source
    return yaml.safe_load((ROOT / source).read_text())


def documented_collector_config() -> dict[str, Any]:
    """The Collector configuration docs/operations.md shows (as
    tests/integration/test_collector.py reads it)."""
    text = OPERATIONS.read_text()
    section = text[text.index("## The OpenTelemetry Collector in front"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def without_addresses(config: dict[str, Any]) -> dict[str, Any]:
    """A Collector configuration with the deployment's own addresses blanked: the brokers
    and the hosts the receivers listen on (their ports kept)."""
    config = copy.deepcopy(config)
    config["exporters"]["kafka"]["brokers"] = []
    for protocol in config["receivers"]["otlp"]["protocols"].values():
        protocol["endpoint"] = ":" + protocol["endpoint"].rsplit(":", 1)[1]
    return config


def test_the_stack_has_every_piece(services: dict[str, dict[str, Any]]) -> None:
    submitters = {f"submit-{job}" for job in JOBS}
    assert {"kafka", "kafka-topics", "otel-collector", "jobmanager", "taskmanager",
            "postgres", "loader", "dashboard", "reconcile"} | submitters <= set(services)
    assert not any("zookeeper" in name for name in services)
    for name in {"jobmanager", "taskmanager", "loader", "dashboard", "reconcile"} | submitters:
        assert services[name]["image"] == IMAGE and services[name]["build"] == ".", name
    assert services["postgres"]["image"].startswith("postgres:")
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", services["kafka"]["image"])


def test_kafka_runs_kraft_with_consistent_listeners(
        services: dict[str, dict[str, Any]], job_configs: dict[str, StreamingJobConfig]
        ) -> None:
    env = services["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in
                     env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(bound) <= set(protocols), set(bound) - set(protocols)
    assert controller in bound
    # every client listener is advertised, at the port it binds; the controller's address
    # is the quorum voter's
    assert set(advertised) == set(bound) - {controller}
    for name, (_, port) in advertised.items():
        assert bound[name][1] == port, name
    assert inter_broker_listener(env) in advertised
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == \
        f"{env['KAFKA_NODE_ID']}@kafka:{bound[controller][1]}"
    # the jobs' exactly-once sinks open transactions this long; the broker must allow it
    for job, config in job_configs.items():
        assert int(env["KAFKA_TRANSACTION_MAX_TIMEOUT_MS"]) >= \
            config.flink.transaction_timeout_s * 1000, job


def test_kafka_serves_the_host_and_the_compose_network(
        services: dict[str, dict[str, Any]]) -> None:
    """A client gets the advertised address of the listener it connected to: the host's
    producers must reach one advertised on loopback, the services one named `kafka`."""
    kafka = services["kafka"]
    env = kafka["environment"]
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    ports = published(kafka)
    external = [name for name, (host, _) in advertised.items() if host in LOOPBACK]
    assert len(external) == 1, advertised
    host, port = advertised[external[0]]
    assert ports[bound[external[0]][1]] == ("127.0.0.1", port)
    internal = inter_broker_listener(env)
    assert advertised[internal][0] == "kafka"  # the service's name on the compose network
    # a published internal listener would hand the host an address it cannot resolve
    assert set(ports) == {bound[external[0]][1]}
    address = kafka_internal(services)
    for name, service in services.items():
        bootstrap = (service.get("environment") or {}).get("SEEDANCE_KAFKA_BOOTSTRAP")
        assert bootstrap in (None, address), name
    assert services["loader"]["environment"]["SEEDANCE_KAFKA_BOOTSTRAP"] == address
    script = " ".join(services["kafka-topics"]["command"])
    assert set(re.findall(r"--bootstrap-server (\S+)", script)) == {address}
    check = kafka["healthcheck"]["test"]
    check_host, check_port = option(check, "--bootstrap-server").rsplit(":", 1)
    assert check_host in {"localhost", "kafka"} and int(check_port) == bound[internal][1]


def test_every_topic_is_created_with_log_append_time(
        services: dict[str, dict[str, Any]], job_configs: dict[str, StreamingJobConfig]
        ) -> None:
    script = " ".join(services["kafka-topics"]["command"])
    loops = re.findall(r"for topic in (.*?); do(.*?); done", script, re.S)
    created = {topic for names, _ in loops for topic in names.split()}
    assert loops and all("message.timestamp.type=LogAppendTime" in body
                         and "--if-not-exists" in body for _, body in loops)
    # the topics read as the latest message per key are created compacted
    compacted = {topic for names, body in loops if "cleanup.policy=compact" in body
                 for topic in names.split()}
    assert compacted == {topic for job in job_configs.values()
                         for topic in topic_settings(STREAMING_JOBS.values(), job)}
    loader = load_config(repo_path(option(services["loader"]["command"], "--config")))
    needed = {load_reconcile_config(None).alerts.topic}
    for job in (*job_configs.values(), loader):
        needed |= {getattr(job.topics, name) for name in job.topics.__dataclass_fields__}
        needed |= {job.gpu.metrics_topic, job.gpu.metrics_dead_letter, job.gpu.costs_topic}
    assert needed <= created, needed - created


def test_flink_cluster_and_shared_state(services: dict[str, dict[str, Any]],
                                        compose: dict[str, Any], submits: dict[str, list[str]],
                                        job_configs: dict[str, StreamingJobConfig]) -> None:
    jm, tm = services["jobmanager"], services["taskmanager"]
    assert (jm["command"], tm["command"]) == ("jobmanager", "taskmanager")
    jm_props = properties(jm["environment"]["FLINK_PROPERTIES"])
    tm_props = properties(tm["environment"]["FLINK_PROPERTIES"])
    assert jm_props["jobmanager.rpc.address"] == tm_props["jobmanager.rpc.address"] == \
        "jobmanager"
    # the four jobs run at once, each on as many slots as its parallelism
    replicas = tm.get("deploy", {}).get("replicas", 1)
    slots = int(tm_props["taskmanager.numberOfTaskSlots"]) * replicas
    assert slots >= sum(job.flink.parallelism for job in job_configs.values()), slots
    # rescaling from a savepoint needs the same max parallelism the state was written with:
    # set where the job graph is built, on the submitting client
    for name, command in submits.items():
        max_parallelism = next(int(a.split("=")[1]) for a in command
                               if a.startswith("-Dpipeline.max-parallelism="))
        assert job_configs[name].flink.parallelism <= max_parallelism, name
    checkpoint_dirs = {job.flink.checkpoint_dir for job in job_configs.values()}
    assert len(checkpoint_dirs) == 1  # each job writes its own folder under it
    checkpoints = checkpoint_dirs.pop().removeprefix("file://")
    savepoints = jm_props["execution.checkpointing.savepoint-dir"].removeprefix("file://")
    for service in (jm, tm):  # both processes must see the same checkpoint files
        mounts = dict(v.split(":")[::-1] for v in service["volumes"])
        assert mounts[checkpoints] == "checkpoints" and mounts[savepoints] == "savepoints"
    declared = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):  # a file of the repository
                assert (ROOT / source).is_file(), (name, volume)
            else:
                assert source in declared or source.startswith(("/", "${")), (name, volume)


def test_every_streaming_job_is_submitted_with_flink_run_python(
        services: dict[str, dict[str, Any]], submits: dict[str, list[str]]) -> None:
    assert set(submits) == set(JOBS)
    for job, command in submits.items():
        assert command[:2] == ["flink", "run"] and "--detached" in command, job
        assert option(command, "--jobmanager") == "jobmanager:8081", job
        entry = repo_path(option(command, "--python"))
        assert entry == ROOT / "jobs" / "flink_entry.py" and entry.exists(), job
        # what follows the script is the entry point's: valid for its parser, a job config
        # of the repository that loads (keys, types)
        args = entry_arguments(command)
        assert args.job == job and args.config.is_file(), job
        load_config(args.config)
        # the job's jars are shipped by flink_entry.py, not named here
        assert "--jarfile" not in command, job
        submitter = services[f"submit-{job}"]
        assert submitter["command"] == command
        assert submitter["depends_on"] == {
            "jobmanager": {"condition": "service_healthy"},
            "taskmanager": {"condition": "service_healthy"},
            "kafka-topics": {"condition": "service_completed_successfully"}}, job
        assert submitter["restart"] == "no", job
    assert "8081" in " ".join(services["jobmanager"]["ports"])
    # the job's jars (the connector the project's POM pins and the job's own JVM classes)
    # are shipped by flink_entry.py from SEEDANCE_JARS/flink: where the Dockerfile puts them
    dockerfile = DOCKERFILE.read_text()
    jars = re.search(r"SEEDANCE_JARS=(\S+)", dockerfile).group(1)
    assert f"COPY --from=jars /jars/flink/ {jars}/flink/" in dockerfile
    assert "mvn --batch-mode --quiet -f jvm/pom.xml -Dout=/jars/flink package" in dockerfile
    # the embedded Python (pemja) from the cluster's lib/, for every job a TaskManager runs
    assert "opt/flink-python-" in dockerfile


def test_the_collector_feeds_the_jobs(services: dict[str, dict[str, Any]],
                                      collector_config: dict[str, Any],
                                      job_configs: dict[str, StreamingJobConfig]) -> None:
    collector = services["otel-collector"]
    image = re.fullmatch(r"otel/opentelemetry-collector-contrib:0\.(\d+)\.\d+",
                         collector["image"])
    assert image, collector["image"]
    # the release of the components the documented configuration was verified with
    built = re.search(r"kafkaexporter v0\.(\d+)\.", COLLECTOR_BUILD.read_text()).group(1)
    assert image.group(1) == built
    assert "command" not in collector  # the image's own: --config COLLECTOR_CONFIG
    assert collector["healthcheck"]["test"][-1] == f"--config={COLLECTOR_CONFIG}"
    assert collector["depends_on"] == {
        "kafka-topics": {"condition": "service_completed_successfully"}}
    # OTLP in: both receivers listen in the container and are published on loopback
    ports = published(collector)
    for protocol, default in (("grpc", 4317), ("http", 4318)):
        host, port = collector_config["receivers"]["otlp"]["protocols"][protocol][
            "endpoint"].rsplit(":", 1)
        assert host == "0.0.0.0" and int(port) == default, protocol
        assert ports[int(port)] == ("127.0.0.1", default), protocol
    # spans and metrics out, OTLP protobuf, through the broker's internal listener, to the
    # topics every job reads them from (created: test_every_topic_is_created_...)
    exporter = collector_config["exporters"]["kafka"]
    assert exporter["brokers"] == [kafka_internal(services)]
    for job, config in job_configs.items():
        assert exporter["traces"]["topic"] == config.topics.spans, job
        assert exporter["metrics"]["topic"] == config.gpu.metrics_topic, job
    assert exporter["traces"]["encoding"] == exporter["metrics"]["encoding"] == "otlp_proto"
    pipelines = collector_config["service"]["pipelines"]
    for signal in ("traces", "metrics"):
        assert pipelines[signal]["receivers"] == ["otlp"], signal
        assert pipelines[signal]["exporters"] == ["kafka"], signal


def test_the_collector_runs_the_documented_configuration(
        collector_config: dict[str, Any]) -> None:
    """docs/operations.md shows the configuration (tests/integration/test_collector.py runs
    it); the compose file's differs only in its addresses."""
    assert without_addresses(collector_config) == \
        without_addresses(documented_collector_config())


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
    # `roi-source-{credit,gpu}` in the table stands for `roi-source-credit`, `roi-source-gpu`
    doc += " ".join(f"`{head}{choice}{tail}`" for head, choices, tail in
                    re.findall(r"`([\w-]*)\{([\w,]+)\}([\w-]*)`", doc)
                    for choice in choices.split(","))
    for streaming_job in JOBS.values():
        job = streaming_job.builder_path.split(":")[0].replace(".", "/") + ".py"
        code = (ROOT / job).read_text()
        # the registry's uids (sources' included: from_kafka sets those) and any other
        # `.uid("...")` in the job's module
        uids = {*streaming_job.uids, *re.findall(r'\.uid\(f?"([^"{]+)', code)}
        assert uids, job
        for uid in sorted(uids):
            assert f"`{uid}" in doc, f"{job}: uid {uid} missing from docs/operations.md"
