"""The local Kafka broker: a single-node KRaft broker run from the jars in .cache/jars.

It listens on loopback ports chosen free at its first start and kept for its data after
that (a broker started again, after a crash or `down`, answers where it did, so clients and
a running job reconnect by themselves), keeps its data under the state folder,
and records its bootstrap address and process id in `<state>/kafka/stack.json` so that
other commands find it and `down` stops exactly the process that `up` started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.settings.paths import SETUP_HINT, jars_home, state_home

log = logging.getLogger(__name__)

BROKER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data_dir}
num.partitions=1
# single node: internal topics cannot have more than one replica
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Flink's KafkaSink asks for 1 h transactions by default; the broker's own cap is 15 min.
transaction.max.timeout.ms=3600000
auto.create.topics.enable=true
log.retention.hours=720
# Results carry event time (weeks old in a replay or backfill); with CreateTime, retention
# would delete them minutes after they are written. The broker stamps arrival time instead.
log.message.timestamp.type=LogAppendTime
"""

LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
"""


class StackError(RuntimeError):
    """The local stack cannot start or be found; the message says what to do."""


@dataclass
class BrokerInfo:
    pid: int
    bootstrap: str
    controller_port: int
    data_dir: str
    log_file: str
    started_at: float
    # with a secured listener (LocalKafka(scram_user=...)): TLS + SASL/SCRAM-SHA-512
    secure_bootstrap: str = ""
    ca_file: str = ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise StackError("Java is not installed or not on PATH: install a Java 17 runtime "
                         "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    return java


def _classpath() -> str:
    folder = jars_home() / "kafka"
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise StackError(f"the Kafka broker jars are missing in {folder}; {SETUP_HINT}")
    return str(folder / "*")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _is_our_broker(pid: int, config: Path) -> bool:
    """Guard against pid reuse: the process must be java running our config file."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(config).encode() in cmdline


SECURE_PROPERTIES = """\
# a second listener for clients: TLS with SASL/SCRAM-SHA-512 (users made at format time)
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},\
SASL_SSL://127.0.0.1:{secure_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secure_port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={store_password}
ssl.key.password={store_password}
"""


class LocalKafka:
    """A KRaft broker whose state lives in `home` (data, config, logs, stack.json).

    `scram_user=(name, password)` adds a client listener with TLS (a certificate for
    127.0.0.1 made with keytool at first start; `ca_file` is what clients trust) and
    SASL/SCRAM-SHA-512 for that user, beside the plain one the tools use on loopback."""

    def __init__(self, home: Path, heap_mb: int = 512,
                 scram_user: tuple[str, str] | None = None) -> None:
        self.home = Path(home)
        self.heap_mb = heap_mb
        self.scram_user = scram_user
        self.config = self.home / "server.properties"
        self.state_file = self.home / "stack.json"
        self.data_dir = self.home / "data"
        self.log_file = self.home / "broker.log"

    # -- state ------------------------------------------------------------------------
    def info(self) -> BrokerInfo | None:
        """The running broker recorded in stack.json, or None (stale records are removed)."""
        if not self.state_file.exists():
            return None
        info = BrokerInfo(**json.loads(self.state_file.read_text()))
        if _alive(info.pid) and _is_our_broker(info.pid, self.config):
            return info
        self.state_file.unlink(missing_ok=True)
        return None

    # -- lifecycle --------------------------------------------------------------------
    def up(self, timeout_s: float = 90.0) -> BrokerInfo:
        running = self.info()
        if running:
            return running
        java, classpath = _java(), _classpath()
        self.home.mkdir(parents=True, exist_ok=True)
        port, controller_port = self._ports()
        properties = BROKER_PROPERTIES.format(port=port, controller_port=controller_port,
                                              data_dir=self.data_dir)
        secure_port, ca_file, scram = 0, "", []
        if self.scram_user:
            secure_port = _free_port()
            keystore, ca_file, store_password = self._tls_material(java)
            properties = "\n".join(line for line in properties.splitlines() if not line
                                   .startswith(("listeners=", "advertised.listeners=",
                                                "listener.security.protocol.map=")))
            properties += "\n" + SECURE_PROPERTIES.format(
                port=port, controller_port=controller_port, secure_port=secure_port,
                keystore=keystore, store_password=store_password)
            name, password = self.scram_user
            scram = ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        self.config.write_text(properties)
        log4j = self.home / "log4j2.yaml"
        log4j.write_text(LOG4J2)
        jvm = [java, f"-Xmx{self.heap_mb}m", f"-Xms{min(self.heap_mb, 256)}m",
               "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={log4j}",
               "-Dlog4j2.formatMsgNoLookups=true", "-cp", classpath]
        if not (self.data_dir / "meta.properties").exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            formatted = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", _new_cluster_id(),
                 "-c", str(self.config), *scram],
                capture_output=True, text=True, check=False)
            if formatted.returncode != 0:
                raise StackError("formatting the Kafka storage failed:\n"
                                 + formatted.stdout + formatted.stderr)
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)  # survives the CLI; stopped by `down`
        info = BrokerInfo(pid=process.pid, bootstrap=f"127.0.0.1:{port}",
                          controller_port=controller_port, data_dir=str(self.data_dir),
                          log_file=str(self.log_file), started_at=time.time(),
                          secure_bootstrap=f"127.0.0.1:{secure_port}" if secure_port else "",
                          ca_file=ca_file)
        self.state_file.write_text(json.dumps(asdict(info), indent=2))
        try:
            wait_until_ready(info.bootstrap, timeout_s, process)
        except StackError:
            self.down()
            raise
        return info

    def _tls_material(self, java: str) -> tuple[str, str, str]:
        """(keystore, CA certificate as PEM, store password): a self-signed certificate for
        127.0.0.1 and localhost, made once with the JDK's keytool."""
        folder = self.home / "tls"
        keystore, ca_file = folder / "broker.p12", folder / "ca.pem"
        password_file = folder / "store-password"
        if not keystore.exists():
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            password_file.write_text(uuid.uuid4().hex)
            password_file.chmod(0o600)
            keytool = str(Path(java).parent / "keytool")
            password = password_file.read_text()
            for args in (["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize",
                          "2048", "-validity", "365", "-dname", "CN=localhost",
                          "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-storetype", "PKCS12",
                          "-keystore", str(keystore), "-storepass", password],
                         ["-exportcert", "-rfc", "-alias", "broker", "-keystore",
                          str(keystore), "-storepass", password, "-file", str(ca_file)]):
                made = subprocess.run([keytool, *args], capture_output=True, text=True,
                                      check=False)
                if made.returncode != 0:
                    raise StackError(f"keytool failed: {made.stdout}{made.stderr}")
        return str(keystore), str(ca_file), password_file.read_text()

    def _ports(self) -> tuple[int, int]:
        """The ports a broker of this home had (kept with its data, so that clients, and a
        running job, reconnect to a restarted broker by themselves), or free ones."""
        if (self.data_dir / "meta.properties").exists() and self.config.exists():
            found = re.search(r"listeners=PLAINTEXT://127\.0\.0\.1:(\d+),"
                              r"CONTROLLER://127\.0\.0\.1:(\d+)", self.config.read_text())
            if found and all(_port_is_free(int(p)) for p in found.groups()):
                return int(found.group(1)), int(found.group(2))
            if found:
                log.warning("the broker's earlier ports %s are taken: new ports, clients "
                            "must be pointed at the new address", found.groups())
        return _free_port(), _free_port()

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker this home started. Returns False if none was running."""
        info = self.info()
        if info is None:
            return False
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(info.pid):
            _reap(info.pid)
            time.sleep(0.2)
        if _alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
            time.sleep(0.5)
            _reap(info.pid)
        self.state_file.unlink(missing_ok=True)
        return True


def default_broker() -> LocalKafka:
    """The broker of `seedance stack up`, in the state folder (`<state>/kafka`)."""
    return LocalKafka(state_home() / "kafka")


def _new_cluster_id() -> str:
    # KRaft cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars).
    # One starting with "-" would be read as an option by the storage tool: draw again.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_until_ready(bootstrap: str, timeout_s: float,
                     process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll until the broker answers a metadata request (not just a TCP accept)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise StackError(f"the Kafka broker exited with code {process.returncode} "
                             "during start-up; see its log for the reason")
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
            try:
                admin.describe_cluster()
                admin.list_topics()
                return
            finally:
                admin.close()
        except (KafkaError, OSError) as error:
            last_error = error
            time.sleep(0.5)
    raise StackError(f"the Kafka broker at {bootstrap} did not answer within {timeout_s:.0f}s "
                     f"(last error: {last_error})")
