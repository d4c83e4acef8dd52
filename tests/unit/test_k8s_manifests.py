"""deploy/k8s/, checked without a cluster: kubeconform -strict validates every manifest against
the schemas vendored in tests/fixtures/k8s/ (Kubernetes 1.33's built-in kinds, the Flink
Kubernetes Operator 1.15's FlinkDeployment CRD; no network), then what matters to the
pipeline: a FlinkDeployment per streaming job of the registry, submitted as docker-compose.yml
submits it, upgraded through savepoints, on RocksDB with incremental checkpoints in shared
volumes; the images, commands, topics and schedules the project uses; secrets referenced,
never written. kubeconform is built by `make setup-dev` (jobs/setup/bootstrap.sh)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.cli import build_parser
from jobs.flink_entry import build_parser as entry_parser
from jobs.flink_entry import cluster_configuration
from pipelines.flink.jobs import STREAMING_JOBS
from pipelines.settings.job_config import load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = ROOT / "tests" / "fixtures" / "k8s"
KUBECONFORM = ROOT / ".cache" / "bin" / "kubeconform"
KUBERNETES_VERSION = "1.33.0"
APP = "/app/"  # where the Dockerfile puts the repository
LOCATIONS = (
    f"{SCHEMAS}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/"
    "{{ .ResourceKind }}{{ .KindSuffix }}.json",
    f"{SCHEMAS}/crds/{{{{ .Group }}}}/{{{{ .ResourceKind }}}}_{{{{ .ResourceAPIVersion }}}}.json",
)


def kubeconform(*paths: Path) -> subprocess.CompletedProcess[str]:
    if not KUBECONFORM.is_file():
        pytest.fail(f"kubeconform is not installed at {KUBECONFORM}: run "
                    "`make setup-dev` (jobs/setup/bootstrap.sh builds it with Go)")
    command = [str(KUBECONFORM), "-strict", "-summary", "-kubernetes-version", KUBERNETES_VERSION,
               "-ignore-filename-pattern", r"kustomization\.yaml$"]
    for location in LOCATIONS:
        command += ["-schema-location", location]
    return subprocess.run([*command, *map(str, paths)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    """Every object of deploy/k8s, each with the file it came from (`_file`)."""
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append({**doc, "_file": path.name})
    return found


def of_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def flink_deployments(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{streaming job: its FlinkDeployment}, by the job the entry point is given."""
    found: dict[str, dict[str, Any]] = {}
    for deployment in of_kind(documents, "FlinkDeployment").values():
        job = entry_arguments(deployment["spec"]["job"]["args"]).job
        assert job not in found, f"{job} has two FlinkDeployments"
        found[job] = deployment
    return found


def entry_arguments(args: list[str]) -> Any:
    """What jobs/flink_entry.py makes of the arguments PythonDriver passes on (those after
    `-py FILE`)."""
    return entry_parser().parse_args(args[args.index("-py") + 2:])


def pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a workload (one; a FlinkDeployment's pod template)."""
    spec = doc.get("spec", {})
    if doc["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]["spec"]]
    if doc["kind"] in ("Deployment", "Job"):
        return [spec["template"]["spec"]]
    if doc["kind"] == "StatefulSet":  # its claim templates are volumes of each pod
        pod = spec["template"]["spec"]
        claims = [{"name": claim["metadata"]["name"], "volumeClaimTemplate": claim["spec"]}
                  for claim in spec.get("volumeClaimTemplates", [])]
        return [{**pod, "volumes": pod.get("volumes", []) + claims}]
    if doc["kind"] == "FlinkDeployment":
        return [spec["podTemplate"]["spec"]]
    return []


def mounts(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{mount path: the volume mounted there}."""
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    return {mount["mountPath"]: volumes[mount["name"]]
            for mount in container.get("volumeMounts", [])}


def job_config(documents: list[dict[str, Any]], deployment: dict[str, Any],
               tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The job config file a FlinkDeployment's entry point reads (from the ConfigMap mounted
    at its folder), written to tmp_path; and the pod's mounts."""
    pod = deployment["spec"]["podTemplate"]["spec"]
    mounted = mounts(pod, pod["containers"][0])
    config = str(entry_arguments(deployment["spec"]["job"]["args"]).config)
    folder, name = config.rsplit("/", 1)
    config_map = of_kind(documents, "ConfigMap")[mounted[folder]["configMap"]["name"]]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(config_map["data"][name])
    return path, mounted


def test_kubeconform_accepts_every_manifest(documents: list[dict[str, Any]]) -> None:
    result = kubeconform(K8S)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"(\d+) resources found in (\d+) files - Valid: (\d+), Invalid: (\d+), "
                        r"Errors: (\d+), Skipped: (\d+)", result.stdout)
    assert summary, result.stdout
    found, _, valid, invalid, errors, skipped = map(int, summary.groups())
    assert found == valid == len(documents) and invalid == errors == skipped == 0, \
        result.stdout


def test_kubeconform_rejects_broken_manifests(tmp_path: Path) -> None:
    """An unknown field and a wrong type, in a built-in kind and in a FlinkDeployment: the
    schemas are strict and the CRD's is the one used."""
    flink = yaml.safe_load((K8S / "flink-roi.yaml").read_text())
    loader = yaml.safe_load((K8S / "loader.yaml").read_text())
    broken = {
        "flink-unknown.yaml": ({**flink, "spec": {**flink["spec"], "upgradeMod": "savepoint"}},
                               "upgradeMod"),
        "flink-type.yaml": ({**flink, "spec": {**flink["spec"], "job": {
            **flink["spec"]["job"], "parallelism": "two"}}}, "/spec/job/parallelism"),
        "flink-enum.yaml": ({**flink, "spec": {**flink["spec"], "job": {
            **flink["spec"]["job"], "upgradeMode": "savepoints"}}}, "/spec/job/upgradeMode"),
        "loader-unknown.yaml": ({**loader, "spec": {**loader["spec"], "replica": 1}},
                                "replica"),
        "loader-type.yaml": ({**loader, "spec": {**loader["spec"], "replicas": "one"}},
                             "/spec/replicas"),
    }
    for name, (doc, _) in broken.items():
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    for name, (_, what) in broken.items():
        result = kubeconform(tmp_path / name)
        assert result.returncode == 1, (name, result.stdout + result.stderr)
        assert "is invalid" in result.stdout and what in result.stdout, (name, result.stdout)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert not any(p.suffix == ".yml" for p in K8S.iterdir())


def test_every_streaming_job_has_a_flink_deployment(
        flink_deployments: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    assert set(flink_deployments) == set(STREAMING_JOBS)
    dockerfile = (ROOT / "Dockerfile").read_text()
    entrypoint = re.search(r'^ENTRYPOINT \["([^"]+)"\]', dockerfile, re.M).group(1)
    flink_version = re.search(r'"apache-flink==(\d+)\.(\d+)\.\d+"',
                              (ROOT / "pyproject.toml").read_text())
    for job, deployment in flink_deployments.items():
        spec = deployment["spec"]
        assert deployment["metadata"]["name"] == STREAMING_JOBS[job].flink_name, job
        assert spec["image"] == compose["x-seedance"]["image"], job
        assert spec["flinkVersion"] == "v{}_{}".format(*flink_version.groups()), job
        # the operator starts the JobManager and TaskManagers through the image's entry point
        assert spec["flinkConfiguration"]["kubernetes.entry.path"] == entrypoint, job
        # PythonDriver runs the entry point compose's submit-* services give `flink run`
        assert spec["job"]["entryClass"] == "org.apache.flink.client.python.PythonDriver"
        jar = spec["job"]["jarURI"].removeprefix("local://")
        assert re.fullmatch(r"/usr/local/lib/python3\.11/site-packages/pyflink/opt/"
                            r"flink-python-(\d+\.\d+)\.\d+\.jar", jar).group(1) == \
            ".".join(flink_version.groups()), job
        args = spec["job"]["args"]
        script = args[args.index("-py") + 1]
        assert script.startswith(APP) and (ROOT / script.removeprefix(APP)).is_file(), job
        submit = compose["services"][f"submit-{job}"]["command"]
        assert script == submit[submit.index("--python") + 1], job
        assert entry_arguments(args).job == job
        assert spec["job"]["state"] == "running", job


def test_upgrades_go_through_savepoints_on_rocksdb(
        flink_deployments: dict[str, dict[str, Any]], documents: list[dict[str, Any]],
        compose: dict[str, Any], tmp_path: Path) -> None:
    claims = of_kind(documents, "PersistentVolumeClaim")
    for job, deployment in flink_deployments.items():
        spec, conf = deployment["spec"], deployment["spec"]["flinkConfiguration"]
        assert spec["job"]["upgradeMode"] == "savepoint", job
        assert conf["state.backend.type"] == "rocksdb", job
        assert conf["execution.checkpointing.incremental"] == "true", job
        assert conf["kubernetes.operator.savepoint.format.type"] == "CANONICAL", job
        assert conf["high-availability.type"] == "kubernetes", job
        # the job config loads (keys, types) and its settings fit the deployment
        path, mounted = job_config(documents, deployment, tmp_path / job)
        config = load_config(path)
        assert spec["job"]["parallelism"] == config.flink.parallelism, job
        max_parallelism = int(conf["pipeline.max-parallelism"])
        submit = compose["services"][f"submit-{job}"]["command"]
        assert f"-Dpipeline.max-parallelism={max_parallelism}" in submit, job
        assert config.flink.parallelism <= max_parallelism, job
        slots = int(conf["taskmanager.numberOfTaskSlots"])
        assert spec["job"]["parallelism"] % slots == 0, job  # no idle slot
        # checkpoints, savepoints and HA metadata on volumes every pod of the job shares
        for key, where in (("execution.checkpointing.dir", config.flink.checkpoint_dir),
                           ("execution.checkpointing.savepoint-dir",
                            conf["execution.checkpointing.savepoint-dir"]),
                           ("high-availability.storageDir",
                            conf["high-availability.storageDir"])):
            assert where.startswith("file:///"), (job, key)
            folder = "/" + where.removeprefix("file:///").split("/")[0]
            claim = claims[mounted[folder]["persistentVolumeClaim"]["claimName"]]
            assert claim["spec"]["accessModes"] == ["ReadWriteMany"], (job, key)
        assert conf["execution.checkpointing.dir"] == config.flink.checkpoint_dir, job
        assert conf["execution.checkpointing.savepoint-dir"].endswith(
            "/" + STREAMING_JOBS[job].flink_name), job


def test_the_cluster_chooses_the_state_backend() -> None:
    """The job's configuration is merged over the cluster's: jobs/flink_entry.py leaves the
    state backend out unless the job config names one (flink.state_backend), or the
    FlinkDeployments' RocksDB would never be used."""
    config = load_config(ROOT / "jobs" / "config" / "cluster.yaml")
    assert config.flink.state_backend == ""
    conf = cluster_configuration(config, "seedance-attribution").to_dict()
    assert "state.backend.type" not in conf, conf
    assert conf["execution.checkpointing.dir"].startswith(config.flink.checkpoint_dir)
    assert conf["execution.checkpointing.interval"] == \
        f"{int(config.flink.checkpoint_interval_s * 1000)} ms"
    named = cluster_configuration(config.replace("flink", state_backend="rocksdb"),
                                  "seedance-attribution").to_dict()
    assert (named["state.backend.type"], named["execution.checkpointing.incremental"]) == \
        ("rocksdb", "true")


def test_images_and_commands_are_the_compose_files(
        documents: list[dict[str, Any]], compose: dict[str, Any]) -> None:
    services = compose["services"]
    images = {services["kafka"]["image"], services["postgres"]["image"],
              compose["x-seedance"]["image"]}
    containers = {}
    for doc in documents:
        for pod in pod_specs(doc):
            for container in pod["containers"]:
                containers[doc["metadata"]["name"]] = container
                if "image" in container:
                    assert container["image"] in images, (doc["_file"], container["image"])
                    assert not container["image"].endswith(":latest") or \
                        container["image"] == compose["x-seedance"]["image"]
    assert containers["kafka"]["image"] == containers["kafka-topics"]["image"] == \
        services["kafka"]["image"]
    assert containers["postgres"]["image"] == services["postgres"]["image"]
    for name in ("loader", "dashboard"):
        assert containers[name]["image"] == services[name]["image"]
        assert containers[name]["args"] == services[name]["command"], name
        assert "command" not in containers[name]  # the image's entry point reads the secrets
    reconcile = services["reconcile"]
    assert containers["reconcile"]["args"] == reconcile["entrypoint"][1:] + reconcile["command"]
    parser = build_parser()
    for name in ("loader", "dashboard", "reconcile", "archiver"):
        args = containers[name]["args"]
        assert args[0] == "seedance" and parser.parse_args(args[1:]).command == args[1], name
    backfill = shlex.split(containers["backfill"]["args"][2])
    assert backfill[:3] == ["exec", "seedance", "backfill"]
    parser.parse_args([arg if "$(" not in arg else "2026-01-01" for arg in backfill[2:]])
    # the dashboard's Service reaches the port its command listens on, and its health check
    dashboard = of_kind(documents, "Deployment")["dashboard"]["spec"]["template"]["spec"]
    port = int(option(containers["dashboard"]["args"], "--port"))
    assert dashboard["containers"][0]["ports"][0]["containerPort"] == port
    assert containers["dashboard"]["readinessProbe"]["httpGet"]["path"] == "/healthz"
    service = of_kind(documents, "Service")["dashboard"]["spec"]
    assert service.get("type", "ClusterIP") == "ClusterIP"  # published behind a proxy only


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_addresses_match_the_services(documents: list[dict[str, Any]]) -> None:
    env = of_kind(documents, "ConfigMap")["seedance-env"]["data"]
    services = of_kind(documents, "Service")
    host, port = env["SEEDANCE_KAFKA_BOOTSTRAP"].split(":")
    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    url = re.fullmatch(r"postgresql://(\w+)@([\w-]+):(\d+)/(\w+)", env["SEEDANCE_WAREHOUSE_URL"])
    assert url, "the warehouse URL names a user, never a password"
    user, host, port, database = url.groups()
    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    postgres = of_kind(documents, "StatefulSet")["postgres"]["spec"]["template"]["spec"]
    pg_env = {e["name"]: e.get("value") for e in postgres["containers"][0]["env"]}
    assert (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"]) == (user, database)
    script = of_kind(documents, "Job")["kafka-topics"]["spec"]["template"]["spec"]
    assert set(re.findall(r"--bootstrap-server (\S+)", script["containers"][0]["args"][0])) \
        == {env["SEEDANCE_KAFKA_BOOTSTRAP"]}


def test_topics_are_created_as_compose_creates_them(
        documents: list[dict[str, Any]], compose: dict[str, Any]) -> None:
    job = of_kind(documents, "Job")["kafka-topics"]["spec"]["template"]["spec"]["containers"][0]
    ours = " ".join(job["command"] + job["args"]).split()
    theirs = " ".join(compose["services"]["kafka-topics"]["entrypoint"] +
                      compose["services"]["kafka-topics"]["command"]).replace("$$", "$").split()
    assert ours == theirs  # compose's service is checked against the jobs' topics


def test_schedules_are_the_projects(documents: list[dict[str, Any]]) -> None:
    cron_jobs = of_kind(documents, "CronJob")
    schedules = ROOT / "jobs" / "schedules"
    for name, dag in (("reconcile", "reconcile_dag.py"), ("backfill", "backfill_dag.py")):
        spec = cron_jobs[name]["spec"]
        expected = re.search(r'schedule="([^"]+)"', (schedules / dag).read_text()).group(1)
        assert spec["schedule"] == expected, name
        assert spec["timeZone"] == "Etc/UTC", name  # the DAGs and cron.example run in UTC
        assert spec["concurrencyPolicy"] == "Forbid", name  # the DAGs' max_active_runs=1
    cron = (schedules / "cron.example").read_text()
    assert re.search(rf"^{re.escape(cron_jobs['reconcile']['spec']['schedule'])} .*"
                     r"seedance reconcile --days 3", cron, re.M)
    # the backfill reads the archive the archiver writes: the same volume at SEEDANCE_HOME
    home = "/home/seedance/.seedance"
    for name, pod in (("backfill", pod_specs(cron_jobs["backfill"])[0]),
                      ("archiver", pod_specs(of_kind(documents, "Deployment")["archiver"])[0])):
        volume = mounts(pod, pod["containers"][0])[home]
        assert volume["persistentVolumeClaim"]["claimName"] == "seedance-archive", name
    assert f"SEEDANCE_HOME={home}" in (ROOT / "Dockerfile").read_text()


def test_secrets_are_referenced_never_written(documents: list[dict[str, Any]]) -> None:
    assert not of_kind(documents, "Secret"), "Secrets are made outside the repository"
    text = "\n".join(p.read_text() for p in K8S.glob("*.yaml"))
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text), "a password in a URL"
    for doc in documents:
        for pod in pod_specs(doc):
            for container in pod["containers"]:
                mounted = mounts(pod, container)
                for env in container.get("env", []):
                    if not re.search(r"PASSWORD|SECRET", env["name"]):
                        continue
                    where = (doc["_file"], env["name"])
                    if "valueFrom" in env:
                        assert "secretKeyRef" in env["valueFrom"], where
                        continue
                    # a file of a mounted Secret, read by the entry point (NAME_FILE)
                    assert env["name"].endswith("_FILE"), where
                    folder, key = env["value"].rsplit("/", 1)
                    secret = mounted[folder]["secret"]
                    assert key in {item["path"] for item in secret["items"]}, where
                    assert secret["secretName"] == "seedance-secrets", where
                for source in container.get("envFrom", []):
                    assert "secretRef" not in source, doc["_file"]
    env = of_kind(documents, "ConfigMap")["seedance-env"]["data"]
    assert not any(re.search(r"PASSWORD|SECRET", key) for key in env)
