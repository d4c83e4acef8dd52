"""The local PostgreSQL server: up, a real connection, down by pid, and clear errors."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pipelines.stack.local_kafka import StackError
from pipelines.stack.postgres import LocalPostgres, find_bindir


@pytest.fixture
def home() -> Iterator[Path]:
    # under /tmp, not pytest's private tmp folder: as root the server runs as `postgres`
    folder = Path(tempfile.mkdtemp(prefix="seedance-pg-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def children(pid: int) -> set[int]:
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(proc.name))
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_connect_down_leaves_no_process(home):
    server = LocalPostgres(home)
    info = server.up()
    try:
        assert server.status() == info
        assert server.up() == info  # already running: the same server
        assert info.url == f"postgresql://seedance@127.0.0.1:{info.port}/seedance"
        assert Path(info.socket_dir) == home / "run"
        assert (home / "pgdata" / "postmaster.pid").read_text().split()[0] == str(info.pid)
        with psycopg.connect(info.url) as conn:
            assert conn.execute("SELECT current_database(), current_user, "
                                "inet_server_addr()::text").fetchone() == (
                "seedance", "seedance", "127.0.0.1/32")
            conn.execute("CREATE TABLE kept (n INTEGER)")
            conn.execute("INSERT INTO kept VALUES (42)")
        if os.geteuid() == 0:  # PostgreSQL refuses root; it runs as the postgres user
            assert (home / "pgdata").stat().st_uid == Path("/proc", str(info.pid)).stat().st_uid
            assert (home / "pgdata").stat().st_uid != 0
        workers = children(info.pid)
        assert len(workers) >= 3  # checkpointer, background writer, walwriter, ...
    finally:
        assert server.down() is True
    assert not running(info.pid)
    assert not any(running(pid) for pid in workers)
    assert server.status() is None
    assert server.down() is False

    again = server.up()  # the same cluster comes back, with its data
    try:
        assert again.pid != info.pid
        with psycopg.connect(again.url) as conn:
            assert conn.execute("SELECT n FROM kept").fetchall() == [(42,)]
    finally:
        server.down()
    assert not running(again.pid)


def test_missing_server_binaries_say_what_to_install(home):
    empty = home / "no-postgres-here"
    empty.mkdir()
    with pytest.raises(StackError) as error:
        LocalPostgres(home / "pg", bin_dir=empty).up()
    message = str(error.value)
    assert str(empty) in message and "apt-get install postgresql" in message
    assert not (home / "pg" / "pgdata").exists()
    assert (find_bindir() / "postgres").exists()  # and the real ones are found


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to `postgres`")
def test_as_root_a_folder_postgres_cannot_reach_is_named(tmp_path):
    # pytest's tmp folders are private (0700) to root
    with pytest.raises(StackError, match="cannot reach .*use a folder it can reach"):
        LocalPostgres(tmp_path / "pg").up()
