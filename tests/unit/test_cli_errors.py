"""Every CLI failure is one line on stderr naming the file, option or server, with exit code
2 for what the user can fix; a traceback only with -v."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError

from jobs import cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_a_binary_control_config_is_named(tmp_path: Path, capsys) -> None:
    config = tmp_path / "control.yaml"
    config.write_bytes(b"\x00\xff\xfe binary \xda\x01")
    code, err = run(["control", "run", "--config", str(config)], capsys)
    assert code == 2
    assert err.strip() == f"seedance: error: {config}: not a text file (byte 1 is not UTF-8)"


def test_a_folder_given_as_a_file_is_one_line(tmp_path: Path, capsys) -> None:
    code, err = run(["spend", "publish", str(tmp_path), "--bootstrap", "127.0.0.1:1"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Is a directory" in err and str(tmp_path) in err
    code, err = run(["run", "--config", str(tmp_path)], capsys)
    assert code == 2 and err.strip() == (f"seedance: error: {tmp_path}: cannot read it: "
                                         "Is a directory")


def test_kafka_failures_name_the_server_and_what_to_check() -> None:
    args = argparse.Namespace(bootstrap="broker-9:9093")
    line = cli.error_line(KafkaTimeoutError("Unable to bootstrap from broker-9:9093"), args)
    assert line.startswith("no Kafka broker answered at broker-9:9093") and "--bootstrap" in line
    line = cli.error_line(SaslAuthenticationFailedError("Authentication failed"), args)
    assert "refused the login" in line and "password" in line


def test_an_unexpected_failure_is_one_line_and_its_traceback_only_with_verbose(
        monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def broken(_args: argparse.Namespace) -> int:
        raise RuntimeError("py4j said a lot\nand then: the JVM is gone")

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), broken))
    code, err = run(["verify"], capsys)
    assert code == 1
    assert err == ("seedance: error: RuntimeError: and then: the JVM is gone "
                   "(-v shows the traceback)\n")
    code, err = run(["-v", "verify"], capsys)
    assert code == 1 and "Traceback (most recent call last)" in err


def _with_func(parser: argparse.ArgumentParser, func) -> argparse.ArgumentParser:
    parser.set_defaults(func=func)
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for sub in action.choices.values():
            sub.set_defaults(func=func)
    return parser


def test_a_dead_flink_jvm_is_one_line_naming_the_job_and_its_checkpoints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The JVM that runs a job dies (killed, out of memory): py4j loses its connection. The
    user gets one line -- which job, where its checkpoints are, how to resume -- and the
    trace only with -v."""
    from py4j.protocol import Py4JNetworkError

    from jobs.commands.common import CliError
    from jobs.commands.stream import resume_hint
    from pipelines.settings.job_config import load_config

    config = load_config().replace("flink", checkpoint_dir=str(tmp_path / "checkpoints"))
    for verbose in (False, True):
        with pytest.raises(CliError) as raised, \
                resume_hint(config, "seedance-attribution", verbose=verbose):
            raise Py4JNetworkError("Answer from Java side is empty")
        line = str(raised.value)
        assert "\n" not in line and line.startswith(
            "the Flink JVM running seedance-attribution exited (Py4JNetworkError)")
        assert str(tmp_path / "checkpoints") in line and "resumes from the newest" in line
        assert ("Traceback" in capsys.readouterr().err) is verbose


PY4J_AFTER_THE_ERROR = """
import logging, sys, threading
from jobs import cli

def fails(args):
    # py4j logging from another thread, as it does while a dead JVM's objects are released
    def log_for_a_while():
        for _ in range(200):
            record = logging.LogRecord("py4j.java_gateway", logging.ERROR,
                                       "/site-packages/py4j/java_gateway.py", 1,
                                       "An error occurred while trying to connect", None, None)
            logging.getLogger().handle(record)
    threading.Thread(target=log_for_a_while, daemon=True).start()
    raise RuntimeError("the JVM is gone")

parser = cli.build_parser()
parser.set_defaults(func=fails)
for action in parser._subparsers._group_actions:
    for sub in action.choices.values():
        sub.set_defaults(func=fails)
cli.build_parser = lambda: parser
code = cli.main(sys.argv[1:])
record = logging.LogRecord("py4j.java_gateway", logging.ERROR,
                           "/site-packages/py4j/java_gateway.py", 1, "released at exit",
                           None, None)
logging.getLogger().handle(record)
sys.exit(code)
"""


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_nothing_py4j_logs_follows_the_error_line(verbose: list[str]) -> None:
    """py4j's records after a failure (a dead JVM's objects released by other threads and at
    exit) never come after the error line, with -v too: it stays the last line."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PY4J_AFTER_THE_ERROR, *verbose, "verify"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-2000:]
    assert lines[-1].startswith("seedance: error: RuntimeError: the JVM is gone"), lines[-5:]
    assert "released at exit" not in done.stderr
    if not verbose:
        assert lines == lines[-1:], lines[:5]
