"""The dashboard's server against hostile clients on loopback: idle connections cannot hang
it, nor 600 slow ones (a request trickling for ever is cut, at the connection limit the
longest waiting are shed), a burst of requests gets answers, every response carries the
security headers, a foreign Host is refused, and exported cells cannot run as spreadsheet
formulas."""

from __future__ import annotations

import contextlib
import csv
import io
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from pipelines.dashboard import app as app_module
from pipelines.store.warehouse import Warehouse
from schemas.rows import ROI_DAILY
from tests.dashboard_warehouse import roi_row


@pytest.fixture
def server(url: str, warehouse: Warehouse) -> Iterator[str]:
    yield from _serve(url)


def get(address: str, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(address + path,
                                     headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_idle_connections_do_not_block_the_health_check(server):
    port = int(server.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    idle[0].sendall(b"GET /roi HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and one half a request
    try:
        started = time.monotonic()
        status, _, body = get(server, "/healthz")
        assert (status, body) == (200, b"ok\n")
        assert time.monotonic() - started < 2
    finally:
        for conn in idle:
            conn.close()


def test_two_thousand_requests_from_twenty_clients(server, capsys):
    paths = ["/healthz", "/roi", "/models", "/csv/roi_by_channel.csv"]
    latencies: list[float] = []
    errors: list[str] = []

    def client(n: int) -> None:
        for i in range(100):
            started = time.perf_counter()
            try:
                status, _, _ = get(server, paths[(n + i) % len(paths)])
                if status != 200:
                    errors.append(str(status))
            except OSError as error:
                errors.append(repr(error))
            latencies.append(time.perf_counter() - started)

    clients = [threading.Thread(target=client, args=(n,)) for n in range(20)]
    started = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    p50, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99)]
    with capsys.disabled():
        print(f"\ndashboard: 2,000 requests, 20 clients, {elapsed:.1f} s, "
              f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, {len(errors)} errors")
    assert errors == [] and len(latencies) == 2000
    assert p99 < 5


def test_every_response_carries_the_security_headers(server):
    for path in ("/roi", "/csv/roi_by_channel.csv", "/nope"):
        _, headers, _ = get(server, path)
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "script-src" not in csp  # no script allowed at all (default-src 'none')
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"
    _, _, page = get(server, "/roi")
    assert b"<script" not in page


def test_a_foreign_host_is_refused(server):
    status, _, body = get(server, "/roi", host="evil.example")
    assert status == 400 and b"host not allowed" in body
    assert get(server, "/healthz", host="localhost:8050")[0] == 200


def test_exported_cells_cannot_run_as_formulas(url, warehouse, server):
    warehouse.store(ROI_DAILY, [
        roi_row("last_click", "2026-10-03", "channel", name, 1, 10, 1, 0)
        for name in ("=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "plain")])
    status, _, body = get(server, "/csv/roi_by_channel.csv")
    assert status == 200
    cells = [cell for row in csv.reader(io.StringIO(body.decode())) for cell in row]
    for dangerous in ("=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)"):
        assert "'" + dangerous in cells and dangerous not in cells
    assert "plain" in cells


def test_experiments_and_control_pages_over_the_server(loop, server):
    """The new pages answer like the others: the same headers, Host check and CSV."""
    for path, cells in (
            ("/experiments", ("3.82 [3.41, 4.25]", ">significant<", ">not significant<",
                              "Sample ratio mismatch in onboarding")),
            ("/control", (">awaiting_approval<", ">success<", "max_change_per_week_percent",
                          "webhook: succeeded after 2 attempts; verified success (+12.0 %)")),
            ("/models", ("31.2 % [29.8, 32.7]",))):
        status, headers, body = get(server, path)
        page = body.decode()
        assert status == 200 and "default-src 'none'" in headers["Content-Security-Policy"]
        assert "<script" not in page and all(cell in page for cell in cells), path
        assert get(server, path, host="evil.example")[0] == 400
    for table in ("experiment_strategy", "credit_intervals", "control_decisions",
                  "control_actions", "control_verifications"):
        status, headers, body = get(server, f"/csv/{table}.csv")
        assert status == 200 and headers["X-Content-Type-Options"] == "nosniff", table
        assert len(list(csv.reader(io.StringIO(body.decode())))) > 1, table
    _, _, body = get(server, "/csv/control_decisions.csv")
    cells = [cell for row in csv.reader(io.StringIO(body.decode())) for cell in row]
    assert "'=HYPERLINK(\"http://x\")" in cells and "=HYPERLINK(\"http://x\")" not in cells


def _connect(port: int, count: int) -> list[socket.socket]:
    conns = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.setblocking(False)
        conns.append(conn)
    return conns


def _trickle(conns: list[socket.socket], stop: threading.Event) -> None:
    """A partial request line, then a byte every half second: never idle, never whole."""
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send(b"GET /roi HTTP/1.1\r\nX-Slow: ")
    while not stop.wait(0.5):
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(b"a")


def _closed_by_server(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _health_within(address: str, seconds: float) -> float:
    started = time.monotonic()
    request = urllib.request.Request(address + "/healthz")
    with urllib.request.urlopen(request, timeout=seconds) as response:
        assert (response.status, response.read()) == (200, b"ok\n")
    return time.monotonic() - started


# slow clients in a process of their own, as they would be: the server's process holds
# only its side of each connection. Half trickle a request that never ends, half are silent.
SLOW_CLIENTS = """
import resource, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (count + 64, hard))
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
for conn in conns[::2]:
    conn.sendall(b"GET /roi HTTP/1.1\\r\\nX-Slow: ")
print("open", flush=True)
while True:
    time.sleep(0.5)
    for conn in conns[::2]:
        try:
            conn.send(b"a")
        except OSError:
            pass
"""


@contextlib.contextmanager
def slow_clients(port: int, count: int) -> Iterator[None]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < count + 64:
        pytest.skip(f"open-files hard limit {hard} is under {count + 64}")
    clients = subprocess.Popen([sys.executable, "-c", SLOW_CLIENTS, str(port), str(count)],
                               stdout=subprocess.PIPE)
    try:
        assert clients.stdout is not None and clients.stdout.readline() == b"open\n"
        yield
    finally:
        clients.kill()
        clients.wait()


def test_six_hundred_slow_connections_do_not_block_the_health_check(server):
    """More connections than waitress's old limit (500), half of them trickling a request
    that never ends, half silent: /healthz still answers at once (510 slow connections
    took the dashboard down when its limit was 500)."""
    with slow_clients(int(server.rsplit(":", 1)[1]), 600):
        assert _health_within(server, 5) < 3


def _serve(warehouse_url: str, **limits: int) -> Iterator[str]:
    served = app_module.make_dashboard_server(warehouse_url, "127.0.0.1", 0, **limits)
    threading.Thread(target=served.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{served.server_port}"
    finally:
        served.shutdown()
        served.server_close()


@pytest.fixture
def quick_timeouts(url: str, warehouse: Warehouse) -> Iterator[str]:
    """Idle connections closed after 1 s, requests whole within 1 s."""
    yield from _serve(url, channel_timeout_s=1, request_timeout_s=1)


@pytest.fixture
def forty_connections(url: str, warehouse: Warehouse) -> Iterator[str]:
    """At most 40 connections, and timeouts too long to act during a test."""
    yield from _serve(url, connection_limit=40, channel_timeout_s=60, request_timeout_s=60)


def test_a_trickling_request_is_cut_at_the_request_timeout(quick_timeouts):
    """A byte every half second is never idle: the request timeout closes it anyway, and
    the idle timeout a silent connection."""
    port = int(quick_timeouts.rsplit(":", 1)[1])
    slow, silent = _connect(port, 2)
    stop = threading.Event()
    trickler = threading.Thread(target=_trickle, args=([slow], stop), daemon=True)
    trickler.start()
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not (_closed_by_server(slow)
                                                   and _closed_by_server(silent)):
            time.sleep(0.1)
        assert _closed_by_server(slow) and _closed_by_server(silent)
    finally:
        stop.set()
        trickler.join()
        slow.close()
        silent.close()


def test_at_the_connection_limit_the_longest_waiting_are_shed(forty_connections):
    """Past the limit (40), the connections waiting longest make room: /healthz answers
    at once rather than waiting in the backlog for a timeout (60 s here)."""
    port = int(forty_connections.rsplit(":", 1)[1])
    conns = _connect(port, 60)
    try:
        assert _health_within(forty_connections, 5) < 3
        assert _closed_by_server(conns[0]) and not _closed_by_server(conns[-1])
    finally:
        for conn in conns:
            conn.close()
