"""`seedance stack up | status | down` as a user runs it: a real broker process."""

import os
import subprocess
import sys
from pathlib import Path

from pipelines.stack.local_kafka import LocalKafka, wait_until_ready


def seedance(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env,
                          capture_output=True, text=True, timeout=180)


def test_up_status_down_controls_exactly_the_started_process(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path)}
    assert seedance("stack", "status", env=env).returncode == 3
    up = seedance("stack", "up", env=env)
    assert up.returncode == 0, up.stderr
    info = LocalKafka(tmp_path / "kafka").info()
    assert info is not None and info.bootstrap in up.stdout
    try:
        wait_until_ready(info.bootstrap, timeout_s=10)  # answers metadata requests
        again = seedance("stack", "up", env=env)
        assert "already running" in again.stdout and info.bootstrap in again.stdout
        status = seedance("stack", "status", env=env)
        assert status.returncode == 0 and f"pid {info.pid}" in status.stdout
    finally:
        down = seedance("stack", "down", env=env)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not Path(f"/proc/{info.pid}").exists() or \
        Path(f"/proc/{info.pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    assert "not running" in seedance("stack", "down", env=env).stdout


def test_missing_jars_give_a_clear_error(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path), "SEEDANCE_JARS": str(tmp_path / "none")}
    result = seedance("stack", "up", env=env)
    assert result.returncode == 2
    assert "Kafka broker jars are missing" in result.stderr and "make setup" in result.stderr


def test_missing_java_gives_a_clear_error(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path), "JAVA_HOME": str(tmp_path / "nojava")}
    result = seedance("stack", "up", env=env)
    assert result.returncode == 2 and "Java is not installed" in result.stderr


def test_commands_without_a_broker_say_how_to_start_one(tmp_path: Path):
    env = {**os.environ, "SEEDANCE_HOME": str(tmp_path)}
    result = seedance("generate", "--users", "1", env=env)
    assert result.returncode == 2 and "seedance stack up" in result.stderr
