"""A standalone Flink cluster on loopback, from the distribution scripts PyFlink ships
(`pyflink/bin`: jobmanager.sh, taskmanager.sh, flink): one JobManager and N TaskManagers
as separate JVMs, jobs submitted with `flink run --python jobs/flink_entry.py`, the way a
production session cluster runs them. `seedance cluster up|down|status` drives it.

Everything the cluster writes (its configuration, logs, process ids) lives in one folder,
`<SEEDANCE_HOME>/flink-cluster` by default; its REST address is kept in `cluster.json`
there, so a later command finds the cluster a previous one started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyflink
import yaml

from pipelines.settings.paths import PROJECT_ROOT, state_home

FLINK_HOME = Path(pyflink.__file__).resolve().parent
ENTRY = PROJECT_ROOT / "jobs" / "flink_entry.py"
# `flink run` (a JVM and the job's Python plan) and `flink stop` (a savepoint, and with
# --drain every window the final watermark closes) take a minute or more on a busy machine
CLIENT_TIMEOUT_S = 300


class ClusterError(RuntimeError):
    """The cluster did not do what was asked; the message says what and where to look."""


@dataclass(frozen=True)
class ClusterInfo:
    rest_port: int
    rpc_port: int
    task_managers: int
    slots_per_task_manager: int
    home: str

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scripts_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    # thread-mode Python runs in the TaskManager JVM (pemja) with the first python on PATH:
    # this environment's, which has the project installed
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(FLINK_HOME=str(FLINK_HOME), FLINK_CONF_DIR=str(home / "conf"),
               FLINK_LIB_DIR=str(home / "lib"), FLINK_LOG_DIR=str(home / "log"),
               FLINK_PID_DIR=str(home / "pids"))
    env.pop("FLINK_ENV_JAVA_OPTS", None)  # would replace the --add-opens flags Flink needs
    return env




class StandaloneFlink:
    def __init__(self, home: Path | None = None) -> None:
        self.home = (home or state_home() / "flink-cluster").resolve()

    # --- lifecycle -----------------------------------------------------------------------

    def up(self, task_managers: int = 2, slots: int = 1, timeout_s: float = 120.0,
           taskmanager_memory: str = "1280m") -> ClusterInfo:
        """Start a JobManager and `task_managers` TaskManagers. On a running cluster, the
        TaskManagers missing from that count (lost ones) are started anew; the info says
        how many run."""
        running = self.info()
        if running is not None and self._answers(running):
            missing = task_managers - self.live_task_managers()
            for _ in range(missing):
                self.start_task_manager()
            if missing > 0:
                self.wait_for_live(task_managers, timeout_s)
            return replace(running, task_managers=self.live_task_managers())
        self.down()
        for sub in ("conf", "lib", "log", "pids"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self._link_lib()
        info = ClusterInfo(_free_port(), _free_port(), task_managers, slots, str(self.home))
        self._write_conf(info, taskmanager_memory)
        (self.home / "cluster.json").write_text(json.dumps(asdict(info)))
        self._script("jobmanager.sh", "start")
        for _ in range(task_managers):
            self.start_task_manager()
        self.wait_for_slots(task_managers * slots, timeout_s)
        return info

    def start_task_manager(self) -> None:
        self._script("taskmanager.sh", "start")

    def live_task_managers(self) -> int:
        """TaskManager processes of this folder that are alive (the JobManager lists a
        killed one until its heartbeat times out)."""
        return sum(1 for pid in self._pids("taskexecutor") if _alive(pid))

    def wait_for_live(self, task_managers: int, timeout_s: float = 120.0) -> None:
        """Until that many TaskManagers run and have registered their slots."""
        deadline = time.monotonic() + timeout_s
        while self.live_task_managers() < task_managers and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.live_task_managers() < task_managers:
            raise ClusterError(f"{self.live_task_managers()} of {task_managers} TaskManagers "
                               f"run after {timeout_s:.0f} s; see the logs in "
                               f"{self.home / 'log'}")
        info = self._require()
        self.wait_for_slots(task_managers * info.slots_per_task_manager,
                            max(1.0, deadline - time.monotonic()))

    def down(self) -> None:
        """Stop every TaskManager and the JobManager this folder started."""
        for daemon in ("taskexecutor", "standalonesession"):
            for pid in self._pids(daemon):
                _kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while any(_alive(p) for p in self._pids(daemon)) and time.monotonic() < deadline:
                time.sleep(0.2)
            for pid in self._pids(daemon):
                _kill(pid, signal.SIGKILL)
            for pid_file in (self.home / "pids").glob(f"flink-*-{daemon}.pid"):
                pid_file.unlink()
        (self.home / "cluster.json").unlink(missing_ok=True)

    def kill_task_manager(self, index: int = 0) -> int:
        """SIGKILL one TaskManager (as a lost machine would die); its pid."""
        pids = [p for p in self._pids("taskexecutor") if _alive(p)]
        if not pids:
            raise ClusterError("no TaskManager is running")
        pid = pids[index % len(pids)]
        _kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid

    # --- state ---------------------------------------------------------------------------

    def info(self) -> ClusterInfo | None:
        try:
            return ClusterInfo(**json.loads((self.home / "cluster.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def status(self) -> dict[str, Any]:
        info = self._require()
        overview = self._get(info, "/overview")
        jobs = self._get(info, "/jobs/overview")["jobs"]
        return {"rest": info.rest, "taskmanagers": overview["taskmanagers"],
                "taskmanager_processes_alive": self.live_task_managers(),
                "slots_total": overview["slots-total"],
                "slots_available": overview["slots-available"],
                "jobs": [{"id": j["jid"], "name": j["name"], "state": j["state"]}
                         for j in jobs]}

    def wait_for_slots(self, slots: int, timeout_s: float = 120.0) -> None:
        info = self._require()
        deadline = time.monotonic() + timeout_s
        seen = -1
        while time.monotonic() < deadline:
            try:
                seen = self._get(info, "/overview")["slots-total"]
                if seen >= slots:
                    return
            except ClusterError:
                pass
            time.sleep(0.5)
        raise ClusterError(f"the cluster has {max(seen, 0)} of {slots} task slots after "
                           f"{timeout_s:.0f} s; see the logs in {self.home / 'log'}")

    # --- jobs ----------------------------------------------------------------------------

    def submit(self, job: str, config_file: Path, bootstrap: str,
               savepoint: str | None = None) -> str:
        """`flink run --python jobs/flink_entry.py` in detached mode (the parallelism and
        everything else from the config file); the job id."""
        info = self._require()
        args = [str(FLINK_HOME / "bin" / "flink"), "run", "--detached",
                "--jobmanager", f"127.0.0.1:{info.rest_port}",
                "--pyClientExecutable", sys.executable, "--pyExecutable", sys.executable]
        if savepoint:
            args += ["--fromSavepoint", savepoint]
        args += ["--python", str(ENTRY), "--streaming-job", job, "--config", str(config_file),
                 "--bootstrap", bootstrap]
        done = self._run(args, timeout_s=CLIENT_TIMEOUT_S)
        found = re.search(r"JobID ([0-9a-f]{32})", done.stdout)
        if not found:
            raise ClusterError(f"flink run did not report a job id:\n{done.stdout[-3000:]}"
                               f"\n{done.stderr[-3000:]}")
        return found.group(1)

    def job_state(self, job_id: str) -> str:
        return str(self._get(self._require(), f"/jobs/{job_id}")["state"])

    def wait_for_job(self, job_id: str, states: tuple[str, ...] = ("FINISHED",),
                     timeout_s: float = 300.0) -> str:
        deadline = time.monotonic() + timeout_s
        state = "?"
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in states:
                return state
            if state in ("FAILED", "CANCELED") and state not in states:
                raise ClusterError(f"job {job_id} is {state}: {self.failure(job_id)}")
            time.sleep(0.5)
        raise ClusterError(f"job {job_id} is still {state} after {timeout_s:.0f} s")

    def completed_checkpoints(self, job_id: str) -> int:
        counts = self._get(self._require(), f"/jobs/{job_id}/checkpoints")["counts"]
        return int(counts["completed"])

    def state_backend(self, job_id: str) -> str:
        """The state backend the job runs with, as Flink names it (e.g.
        EmbeddedRocksDBStateBackend)."""
        config = self._get(self._require(), f"/jobs/{job_id}/checkpoints/config")
        return str(config.get("state_backend", ""))

    def restarts(self, job_id: str) -> int:
        """How many times the job was restarted after a failure."""
        exceptions = self._get(self._require(), f"/jobs/{job_id}/exceptions")
        return len(exceptions.get("exceptionHistory", {}).get("entries", []))

    def failure(self, job_id: str) -> str:
        try:
            exceptions = self._get(self._require(), f"/jobs/{job_id}/exceptions")
            entries = exceptions.get("exceptionHistory", {}).get("entries", [])
            text = entries[0].get("stacktrace", "") if entries else ""
            return str(text or exceptions.get("root-exception", ""))[:2000] or \
                "no exception recorded"
        except ClusterError as error:
            return str(error)

    def stop_with_savepoint(self, job_id: str, folder: Path, drain: bool = False) -> str:
        """`flink stop`: a savepoint, then the job ends (its sinks commit); the savepoint's
        path. `drain`: first the final watermark, so every window and journey closes (for
        a job that will not be resumed). The jobs carry the final watermark past a source
        whose partitions are all idle (`pipelines.flink.runtime.kafka.from_kafka`)."""
        info = self._require()
        done = self._run([str(FLINK_HOME / "bin" / "flink"), "stop", "--type",
                          "canonical", "--savepointPath", folder.resolve().as_uri(),
                          *(["--drain"] if drain else []),
                          "--jobmanager", f"127.0.0.1:{info.rest_port}", job_id],
                         timeout_s=CLIENT_TIMEOUT_S)
        found = re.search(r"Savepoint completed\. Path: (\S+)", done.stdout)
        if not found:
            raise ClusterError(f"flink stop gave no savepoint:\n{done.stdout[-3000:]}")
        # the job has ended (its sinks committed what the savepoint holds) before this
        # returns: a reader right after a stop sees every result
        self.wait_for_job(job_id, ("FINISHED",), CLIENT_TIMEOUT_S)
        return found.group(1)

    def cancel_unfinished(self, timeout_s: float = 60.0) -> list[str]:
        """Cancel every job that has not ended (a run a failed check left behind must not
        hold the slots the next one needs), until each has; their ids."""
        info = self._require()
        ended = ("FINISHED", "CANCELED", "FAILED")
        unfinished = [j["jid"] for j in self._get(info, "/jobs/overview")["jobs"]
                      if j["state"] not in ended]
        for job_id in unfinished:
            request = urllib.request.Request(f"{info.rest}/jobs/{job_id}?mode=cancel",
                                             method="PATCH")
            try:
                urllib.request.urlopen(request, timeout=10).close()
            except (urllib.error.URLError, OSError) as error:
                raise ClusterError(f"cancelling {job_id}: {error}") from error
        for job_id in unfinished:
            self.wait_for_job(job_id, ended, timeout_s)
        return unfinished

    # --- plumbing ------------------------------------------------------------------------

    def _link_lib(self) -> None:
        """The cluster's lib/: PyFlink's, plus its flink-python jar (from opt/, as Flink's
        PyFlink images do). Loaded once per TaskManager there, the embedded Python (pemja)
        serves every job; shipped with each job instead, a TaskManager's second Python job
        fails to load it again in a new class loader."""
        lib = self.home / "lib"
        for old in lib.glob("*.jar"):
            old.unlink()
        for jar in [*(FLINK_HOME / "lib").glob("*.jar"),
                    *(FLINK_HOME / "opt").glob("flink-python-*.jar")]:
            (lib / jar.name).symlink_to(jar)

    def _write_conf(self, info: ClusterInfo, taskmanager_memory: str) -> None:
        conf = self.home / "conf"
        for name in ("log4j.properties", "log4j-console.properties", "log4j-cli.properties",
                     "logback.xml", "logback-console.xml"):
            shutil.copy(FLINK_HOME / "conf" / name, conf / name)
        shipped = yaml.safe_load((FLINK_HOME / "conf" / "config.yaml").read_text())
        settings = {
            "env": shipped["env"],  # the JVM flags Flink needs on Java 17
            "jobmanager.bind-host": "127.0.0.1",
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": info.rpc_port,
            "jobmanager.memory.process.size": "1024m",
            "jobmanager.execution.failover-strategy": "region",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "127.0.0.1",
            "taskmanager.numberOfTaskSlots": info.slots_per_task_manager,
            "taskmanager.memory.process.size": taskmanager_memory,
            "taskmanager.memory.managed.fraction": 0.1,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": info.rest_port,
            # a killed TaskManager is noticed in seconds, not the default 50
            "heartbeat.interval": "2 s",
            "heartbeat.timeout": "10 s",
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            # pemja (the embedded Python) from lib/ for every job, never a job's own copy
            "classloader.parent-first-patterns.additional": "pemja.",
        }
        (conf / "config.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        (conf / "masters").write_text(f"127.0.0.1:{info.rest_port}\n")
        (conf / "workers").write_text("127.0.0.1\n" * info.task_managers)

    def _script(self, name: str, *args: str) -> None:
        self._run(["bash", str(FLINK_HOME / "bin" / name), *args], timeout_s=120)

    def _run(self, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(args, env=_scripts_env(self.home), capture_output=True,
                                  text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                                  cwd=PROJECT_ROOT)
        except subprocess.TimeoutExpired as error:
            raise ClusterError(f"{' '.join(args[:3])} ran past {timeout_s:.0f} s") from error
        if done.returncode != 0:
            raise ClusterError(f"{Path(args[0]).name if args[0] != 'bash' else args[1]} "
                               f"{' '.join(args[1:3])} failed ({done.returncode}):\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def _pids(self, daemon: str) -> list[int]:
        pids: list[int] = []
        for pid_file in (self.home / "pids").glob(f"flink-*-{daemon}.pid"):
            pids += [int(line) for line in pid_file.read_text().split() if line.isdigit()]
        return pids

    def _require(self) -> ClusterInfo:
        info = self.info()
        if info is None:
            raise ClusterError(f"no cluster is running from {self.home}: "
                               "start one with `seedance cluster up`")
        return info

    def _answers(self, info: ClusterInfo) -> bool:
        try:
            self._get(info, "/overview")
            return True
        except ClusterError:
            return False

    @staticmethod
    def _get(info: ClusterInfo, path: str) -> Any:
        try:
            with urllib.request.urlopen(info.rest + path, timeout=10) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise ClusterError(f"the JobManager at {info.rest} did not answer {path}: "
                               f"{error}") from error


def _alive(pid: int) -> bool:
    """Whether the process runs: it exists and is not a zombie (killed, not reaped yet: a
    container whose first process reaps nothing keeps those)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): existing is all that can be told
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
