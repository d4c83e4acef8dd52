"""A standalone Spark cluster on this machine, run from the pyspark package itself.

One master and `workers` workers (`spark-class org.apache.spark.deploy.master.Master` and
`... deploy.worker.Worker spark://host:port`, from `<pyspark>/bin`, with SPARK_HOME the
pyspark package folder), bound to 127.0.0.1 on free ports, each worker offering
`worker_cores` cores and `worker_memory` to executors. Everything lives in `home`: the
settings file, one log per process (`master.log`, `worker-1.log`, ...) and each worker's
work folder (`work-1/<app id>/<executor id>/stderr`, the executors' own logs). `up` waits
until the master's web UI (`<web_ui>/json/`) lists every worker ALIVE; `down` stops
exactly the processes `up` started, by their process ids (`spark-class` execs the JVM, so
the id it was started with is the daemon's). For tests and trying a job on a real cluster
manager (docs/backfill.md); not a deployment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.stack.local_kafka import StackError, _alive, _free_port, _java, _reap

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
# The daemons' own settings: fail on a taken port instead of quietly binding the next one
# (the web UI must be where we poll it), no REST submission server (it takes port 6066).
PROPERTIES = """\
# Written by pipelines/stack/spark_standalone.py
spark.port.maxRetries 0
spark.master.rest.enabled false
spark.ui.showConsoleProgress false
"""


@dataclass
class SparkClusterInfo:
    master_url: str  # spark://127.0.0.1:<port>, what --master takes
    web_ui: str  # http://127.0.0.1:<port>; its /json/ is the cluster's state
    master_pid: int
    worker_pids: list[int]
    work_dirs: list[str]  # one per worker: <app id>/<executor id>/{stdout,stderr}
    log_files: list[str] = field(default_factory=list)  # master's first


def pyspark_home() -> Path:
    """The pyspark package folder: SPARK_HOME of a pip-installed Spark (bin/, jars/)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise StackError(f"{home} holds no bin/spark-class or jars/: the pyspark package "
                         "is incomplete; reinstall it (`make setup`)")
    return home


class LocalSparkCluster:
    """A master and its workers whose settings, logs and work folders live in `home`."""

    def __init__(self, home: Path, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g", daemon_memory: str = "256m") -> None:
        self.home = Path(home).absolute()
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory  # the master's and each worker's own heap
        self.properties = self.home / "spark-daemons.conf"
        self._info: SparkClusterInfo | None = None
        self._processes: dict[int, subprocess.Popen[bytes]] = {}  # by pid

    @property
    def info(self) -> SparkClusterInfo | None:
        return self._info

    # -- lifecycle --------------------------------------------------------------------
    def up(self, timeout_s: float = 120.0) -> SparkClusterInfo:
        if self._info is not None:
            return self._info
        _java()  # a clear error without Java; spark-class finds it the same way
        spark_home = pyspark_home()
        self.home.mkdir(parents=True, exist_ok=True)
        self.properties.write_text(PROPERTIES)
        env = self._environment(spark_home)
        last = ""
        for _attempt in range(3):  # a free port can be taken before the master binds it
            port, ui_port = _free_port(), _free_port()
            master = self._start(spark_home, env, "master",
                                 [MASTER_CLASS, "--host", HOST, "--port", str(port),
                                  "--webui-port", str(ui_port)])
            web_ui = f"http://{HOST}:{ui_port}"
            try:
                self._wait(web_ui, timeout_s, [(master, self.home / "master.log")], workers=0)
            except StackError as error:
                last = str(error)
                self._stop(master.pid)
                if "BindException" in _tail(self.home / "master.log", 200):
                    continue
                raise
            break
        else:
            raise StackError(last)
        master_url = f"spark://{HOST}:{port}"
        workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        for number in range(1, self.workers + 1):
            work_dir = self.home / f"work-{number}"
            work_dir.mkdir(exist_ok=True)
            # port 0: the worker's RPC and web UI on ports the system picks (no race)
            process = self._start(spark_home, env, f"worker-{number}", [
                WORKER_CLASS, master_url, "--host", HOST, "--port", "0", "--webui-port", "0",
                "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                "--work-dir", str(work_dir)])
            workers.append((process, self.home / f"worker-{number}.log"))
        self._info = SparkClusterInfo(
            master_url=master_url, web_ui=web_ui, master_pid=master.pid,
            worker_pids=[p.pid for p, _ in workers],
            work_dirs=[str(self.home / f"work-{n}") for n in range(1, self.workers + 1)],
            log_files=[str(self.home / "master.log"), *(str(log) for _, log in workers)])
        try:
            self._wait(web_ui, timeout_s, [(master, self.home / "master.log"), *workers],
                       workers=self.workers)
        except StackError:
            self.down()
            raise
        return self._info

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the workers, then the master. Returns False if nothing was running."""
        if self._info is None:
            return False
        for pid in [*self._info.worker_pids, self._info.master_pid]:
            self._stop(pid, timeout_s)
        self._info = None
        return True

    # -- the master's view --------------------------------------------------------------
    def state(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The master's JSON (`<web_ui>/json/`): workers, active and completed apps."""
        if self._info is None:
            raise StackError(f"no standalone Spark cluster is running in {self.home}")
        return _master_json(self._info.web_ui, timeout_s)

    # -- internals --------------------------------------------------------------------
    def _environment(self, spark_home: Path) -> dict[str, str]:
        """This environment without another Spark's settings; SPARK_CONF_DIR is `home`, so
        no spark-env.sh or spark-defaults.conf from elsewhere is read."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SPARK_", "PYSPARK_"))}
        return {**env, "SPARK_HOME": str(spark_home), "SPARK_CONF_DIR": str(self.home),
                "SPARK_LOCAL_IP": HOST, "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_LOG_DIR": str(self.home)}

    def _start(self, spark_home: Path, env: dict[str, str], name: str,
               args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.home / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                [str(spark_home / "bin" / "spark-class"), *args,
                 "--properties-file", str(self.properties)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=self.home, start_new_session=True)  # stopped by `down`, by its pid
        self._processes[process.pid] = process
        return process

    def _wait(self, web_ui: str, timeout_s: float,
              processes: list[tuple[subprocess.Popen[bytes], Path]], workers: int) -> None:
        """Until the master answers ALIVE with `workers` workers ALIVE; a process that
        exits meanwhile fails it, naming its log."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            for process, log in processes:
                if process.poll() is not None:
                    raise StackError(
                        f"the Spark {log.stem} exited with code {process.returncode} during "
                        f"start-up: {_error_line(log)} (log: {log})")
            try:
                state = _master_json(web_ui, 3.0)
            except (OSError, ValueError) as error:
                last = error
            else:
                alive = sum(w.get("state") == "ALIVE" for w in state.get("workers", []))
                last = f"master {state.get('status')}, {alive} of {workers} workers ALIVE"
                if state.get("status") == "ALIVE" and alive >= workers:
                    return
            time.sleep(0.5)
        logs = ", ".join(str(log) for _, log in processes)
        raise StackError(f"the standalone Spark cluster at {web_ui} was not ready within "
                         f"{timeout_s:.0f}s ({last}; logs: {logs})")

    def _stop(self, pid: int, timeout_s: float = 30.0) -> None:
        """SIGTERM (a worker then stops its executors), SIGKILL after `timeout_s`."""
        process = self._processes.pop(pid, None)

        def running() -> bool:
            if process is not None:
                return process.poll() is None  # reaps it once it has exited
            _reap(pid)
            return _alive(pid)

        if not (running() and self._is_ours(pid)):
            return
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and running():
                time.sleep(0.1)
            if not running():
                break

    def _is_ours(self, pid: int) -> bool:
        """Guard against pid reuse: the process must be a JVM given our settings file."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.properties).encode() in cmdline


def _master_json(web_ui: str, timeout_s: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{web_ui}/json/", timeout=timeout_s) as answer:
            state: dict[str, Any] = json.loads(answer.read())
    except urllib.error.URLError as error:
        raise OSError(f"{web_ui}/json/: {error.reason}") from None
    return state


def _tail(log: Path, lines: int) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _error_line(log: Path) -> str:
    """The log's last line that says what went wrong (an exception or ERROR), else its last."""
    text = _tail(log, 200).splitlines()
    for line in reversed(text):
        if "Exception" in line or " ERROR " in line or "Error:" in line:
            return line.strip()
    return text[-1].strip() if text else "(empty log)"
