"""A local PostgreSQL server for the warehouse: a private cluster in a folder of ours.

The cluster (initdb) lives in `<home>/pgdata`, listens on a free loopback port with trust
authentication for loopback only, keeps its unix socket in `<home>/run`, and holds the
database `seedance`. PostgreSQL records its own process id in `postmaster.pid`; `down`
stops exactly that process. PostgreSQL refuses to run as root: as root, the server runs
as the `postgres` system user (the Debian package creates it), which owns `<home>`.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from pipelines.stack.local_kafka import StackError, _alive, _free_port, _reap

DATABASE = "seedance"
USER = "seedance"
INSTALL_HINT = ("install the PostgreSQL server (Debian: apt-get install postgresql; "
                "`make setup-dev` does it when run as root)")
# Socket paths longer than this do not fit in sockaddr_un (108 bytes with the file name).
_MAX_SOCKET_DIR = 90

HBA = """\
# Written by pipelines/stack/postgres.py: trust on the private socket and loopback only.
local all all              trust
host  all all 127.0.0.1/32 trust
"""


@dataclass
class PostgresInfo:
    pid: int
    url: str
    port: int
    data_dir: str
    socket_dir: str
    log_file: str


def find_bindir() -> Path:
    """The folder of the server binaries: `pg_config --bindir` if it has them, else the
    newest /usr/lib/postgresql/<version>/bin (Debian keeps them off PATH)."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0 and done.stdout.strip():
            candidates.append(Path(done.stdout.strip()))
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=lambda p: _version_key(p.parent.name), reverse=True)
    for folder in candidates:
        if _has_server(folder):
            return folder
    raise StackError(f"PostgreSQL server binaries (initdb, postgres) not found; {INSTALL_HINT}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name)) or (0,)


def _has_server(folder: Path) -> bool:
    return all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "postgres"))


class LocalPostgres:
    """A PostgreSQL cluster whose state lives in `home` (pgdata, run/, postgres.log)."""

    def __init__(self, home: Path, bin_dir: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.home = Path(home).absolute()
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.settings = dict(settings or {})  # extra server settings (-c name=value)
        self.data_dir = self.home / "pgdata"
        self.socket_dir = self.home / "run"
        self.log_file = self.home / "postgres.log"

    # -- state ------------------------------------------------------------------------
    def status(self) -> PostgresInfo | None:
        """The running server of this home (from postmaster.pid), or None."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            pid, port, socket_dir = int(lines[0]), int(lines[3]), lines[4]
        except (OSError, ValueError, IndexError):
            return None
        if not (_alive(pid) and _is_our_server(pid, self.data_dir)):
            return None  # stale file: PostgreSQL itself replaces it on the next start
        return PostgresInfo(pid=pid, url=f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}",
                            port=port, data_dir=str(self.data_dir), socket_dir=socket_dir,
                            log_file=str(self.log_file))

    # -- lifecycle --------------------------------------------------------------------
    def up(self, timeout_s: float = 60.0) -> PostgresInfo:
        running = self.status()
        if running:
            return running
        bin_dir = self.bin_dir or find_bindir()
        if not _has_server(bin_dir):
            raise StackError(f"no PostgreSQL server binaries (initdb, postgres) in {bin_dir}; "
                             f"{INSTALL_HINT}")
        run_as = _run_as()
        self._prepare(run_as)
        if not (self.data_dir / "PG_VERSION").exists():
            done = subprocess.run(
                [*run_as, str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", USER,
                 "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                capture_output=True, text=True, check=False, cwd=self.home)
            if done.returncode != 0:
                raise StackError(f"initdb failed in {self.data_dir}:\n{done.stdout}{done.stderr}")
            (self.data_dir / "pg_hba.conf").write_text(HBA)
        last = ""
        for _attempt in range(3):  # a free port can be taken before the server binds it
            port = _free_port()
            process = self._start(run_as, bin_dir, port)
            try:
                self._wait_until_ready(port, timeout_s, process)
            except StackError as error:
                last = str(error)
                self._stop_pid(process.pid)
                if "already in use" in self._log_tail(5):
                    continue
                raise
            self._ensure_database(port, DATABASE)
            info = self.status()
            if info is None:
                raise StackError(f"PostgreSQL started but {self.data_dir}/postmaster.pid "
                                 "does not name it")
            return info
        raise StackError(last)

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the server this home started. Returns False if none was running."""
        info = self.status()
        if info is None:
            return False
        self._stop_pid(info.pid, timeout_s)
        return True

    # -- databases --------------------------------------------------------------------
    def create_database(self, name: str) -> str:
        """Create database `name` (if missing) on the running server; returns its URL."""
        info = self.status()
        if info is None:
            raise StackError(f"no PostgreSQL server is running in {self.home}")
        self._ensure_database(info.port, name)
        return f"postgresql://{USER}@127.0.0.1:{info.port}/{name}"

    def drop_database(self, name: str) -> None:
        info = self.status()
        if info is None:
            return
        with _admin(info.port) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))

    # -- internals --------------------------------------------------------------------
    def _prepare(self, run_as: list[str]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if len(str(self.socket_dir)) > _MAX_SOCKET_DIR:
            raise StackError(f"{self.socket_dir} is too long a path for a unix socket; "
                             "put the PostgreSQL folder somewhere shorter")
        if not run_as:
            return
        owner = pwd.getpwnam("postgres")
        for path in (self.home, self.socket_dir):
            os.chown(path, owner.pw_uid, owner.pw_gid)
            path.chmod(0o700)
        reachable = subprocess.run([*run_as, "test", "-w", str(self.home)],
                                   capture_output=True, check=False, cwd="/")
        if reachable.returncode != 0:
            raise StackError(f"running as root, PostgreSQL runs as the 'postgres' user, which "
                             f"cannot reach {self.home} (a parent folder is private); use a "
                             "folder it can reach, for example under /tmp")

    def _start(self, run_as: list[str], bin_dir: Path, port: int) -> subprocess.Popen[bytes]:
        settings = {"listen_addresses": "127.0.0.1", **self.settings}
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        with open(self.log_file, "ab") as log:
            if run_as:
                os.chown(self.log_file, pwd.getpwnam("postgres").pw_uid, -1)
            return subprocess.Popen(
                [*run_as, str(bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(port),
                 "-k", str(self.socket_dir), *options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.home, start_new_session=True)  # outlives the caller; see `down`

    def _wait_until_ready(self, port: int, timeout_s: float,
                          process: subprocess.Popen[bytes]) -> None:
        """Poll until a real connection answers a query (not just a TCP accept)."""
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StackError(f"PostgreSQL exited with code {process.returncode} during "
                                 f"start-up: {self._log_tail()} (log: {self.log_file})")
            try:
                with _admin(port, timeout_s=2) as conn:
                    conn.execute("SELECT 1").fetchone()
                return
            except psycopg.OperationalError as error:
                last_error = error
                time.sleep(0.2)
        raise StackError(f"PostgreSQL on 127.0.0.1:{port} did not answer within "
                         f"{timeout_s:.0f}s (last error: {last_error}; log: {self.log_file})")

    def _ensure_database(self, port: int, name: str) -> None:
        with _admin(port) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (name,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def _stop_pid(self, pid: int, timeout_s: float = 30.0) -> None:
        # SIGINT is PostgreSQL's "fast" shutdown: clients are disconnected, data is flushed.
        # SIGTERM would wait for every client to leave; SIGQUIT and SIGKILL are last resorts.
        for sig, wait_s in ((signal.SIGINT, timeout_s), (signal.SIGQUIT, 5.0),
                            (signal.SIGKILL, 5.0)):
            if not _alive(pid):
                break
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and _alive(pid):
                _reap(pid)
                time.sleep(0.1)
        _reap(pid)

    def _log_tail(self, lines: int = 1) -> str:
        try:
            text = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " / ".join(text[-lines:])


def _admin(port: int, timeout_s: float = 10) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres",
                           connect_timeout=max(1, int(timeout_s)), autocommit=True)


def _run_as() -> list[str]:
    """The command prefix that runs the server as `postgres` when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise StackError("running as root, but PostgreSQL refuses to run as root and there is "
                         "no 'postgres' system user to run it as; "
                         f"{INSTALL_HINT} (it creates the user)") from None
    setpriv = shutil.which("setpriv")
    if setpriv:  # execs in place: the started process is the server itself
        return [setpriv, "--reuid=postgres", "--regid=postgres", "--init-groups"]
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--"]
    raise StackError("running as root: need setpriv or runuser (util-linux) to start "
                     "PostgreSQL as the 'postgres' user")


def _is_our_server(pid: int, data_dir: Path) -> bool:
    """Guard against pid reuse: the process must be a postgres serving our data folder."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(data_dir).encode() in cmdline
