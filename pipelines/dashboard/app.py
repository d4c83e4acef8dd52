"""The dashboard as a WSGI application, served by waitress.

Routes: `/` (to the ROI view), `/<view>` (HTML: roi, models, stages, reconciliation,
alerts, experiments, control, compute, lifetime; each table a page of at most 200 rows at a time,
`?page.<table>=N`), `/csv/<table>.csv` (every row of a table, same filters),
`/healthz` (the warehouse answers). Read-only: only GET and HEAD. Every response carries
security headers (a Content-Security-Policy without script, nosniff, no framing, no
referrer); a request whose Host is not an allowed name is refused (DNS
rebinding); exported cells that a spreadsheet would run as a formula are neutralised.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

import psycopg

from pipelines.dashboard import pages
from pipelines.dashboard.filters import FilterError, Filters, parse_filters
from pipelines.dashboard.paging import EVERY_ROW, parse_paging
from pipelines.dashboard.queries import VIEWS, build_view, options, resolve_model
from pipelines.dashboard.server import (
    CHANNEL_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    create_shedding_server,
)
from pipelines.dashboard.tables import View
from pipelines.store.warehouse import Warehouse, WarehouseError, redacted_url

log = logging.getLogger("seedance.dashboard")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

# which view holds each exported table (a CSV is built from the same view as its page)
TABLE_VIEWS = {
    "roi_by_channel": "roi", "roi_by_campaign": "roi", "roi_by_day": "roi",
    "models_summary": "models", "models_revenue": "models", "models_roi": "models",
    "stage_allocation": "stages", "recon_breaches": "reconciliation",
    "recon_rows": "reconciliation", "recon_internal": "reconciliation",
    "alerts_open": "alerts", "alerts_resolved": "alerts",
    "credit_intervals": "models", "experiment_strategy": "experiments",
    "control_decisions": "control", "control_actions": "control",
    "control_verifications": "control", "compute_by_workload": "compute",
    "compute_unit_cost": "compute", "compute_per_conversion": "compute",
    "compute_pool_busy": "compute", "compute_unshared": "compute",
    "ltv_by_channel": "lifetime", "ltv_by_campaign": "lifetime",
    "ltv_segments": "lifetime", "ltv_calibration": "lifetime",
    "roi_calibrated": "incrementality", "lift_tests": "incrementality"}


WORKERS = 4  # threads running the app (each with one warehouse connection)
PAGE_WAIT_S = 1.0  # a page request waits this long for a page worker, then gets 503


class DashboardApp:
    """Each worker thread keeps one warehouse connection and reuses it: SQLite connections
    belong to the thread that opened them, and opening a Warehouse applies the schema's
    DDL, which a page view should not repeat. A connection that failed is dropped, so the
    next request reconnects (e.g. after a database restart)."""

    def __init__(self, warehouse_url: str, allowed_hosts: Iterable[str] = (),
                 page_slots: int = WORKERS - 1) -> None:
        self.warehouse_url = warehouse_url
        self.source = redacted_url(warehouse_url)  # the only form of the URL ever shown
        self._local = threading.local()
        self.allowed_hosts = {h.lower() for h in (*LOOPBACK_NAMES, *allowed_hosts)}
        # pages and CSVs (warehouse queries of any size) run on at most this many workers
        # at once; a request that finds them taken for PAGE_WAIT_S gets 503, so /healthz
        # and the cheap answers wait at most that long, whatever the load
        self._pages = threading.BoundedSemaphore(page_slots)

    def _warehouse(self) -> Warehouse:
        warehouse: Warehouse | None = getattr(self._local, "warehouse", None)
        if warehouse is None:
            warehouse = self._local.warehouse = Warehouse(self.warehouse_url, create=False)
        return warehouse

    def _drop_warehouse(self) -> None:
        warehouse = getattr(self._local, "warehouse", None)
        self._local.warehouse = None
        if warehouse is not None:
            with contextlib.suppress(Exception):
                warehouse.close()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if _host_name(environ.get("HTTP_HOST", "")) not in self.allowed_hosts:
            # a page answering any Host is open to DNS rebinding from a browser
            return _respond(start_response, "400 Bad Request", "text/plain",
                            b"host not allowed: start the dashboard with --allowed-host NAME\n")
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if method not in ("GET", "HEAD"):
            return _respond(start_response, "405 Method Not Allowed", "text/plain",
                            b"read-only dashboard\n", [("Allow", "GET, HEAD")])
        if path == "/":
            return _respond(start_response, "302 Found", "text/plain", b"",
                            [("Location", "/roi")])
        table = path.removeprefix("/csv/").removesuffix(".csv")
        view = path.strip("/")
        if path != "/healthz" and view not in VIEWS and not (
                path.startswith("/csv/") and path.endswith(".csv") and table in TABLE_VIEWS):
            return _respond(start_response, "404 Not Found", "text/plain", b"no such page\n")
        try:
            warehouse = self._warehouse()
        except WarehouseError as error:  # its message already hides the password
            return _respond(start_response, "503 Service Unavailable", "text/plain",
                            f"{error}\n".encode())
        if path != "/healthz" and not self._pages.acquire(timeout=PAGE_WAIT_S):
            return _respond(start_response, "503 Service Unavailable", "text/plain",
                            b"busy: every page worker is taken; try again shortly\n",
                            [("Retry-After", "2")])
        try:
            return self._route(start_response, warehouse, environ, path, view, table)
        except (sqlite3.Error, psycopg.Error):
            self._drop_warehouse()
            raise
        finally:
            if path != "/healthz":
                self._pages.release()

    def _route(self, start_response: StartResponse, warehouse: Warehouse,
               environ: dict[str, Any], path: str, view: str, table: str) -> Iterable[bytes]:
        if path == "/healthz":
            warehouse.query("SELECT 1")
            return _respond(start_response, "200 OK", "text/plain", b"ok\n")
        try:
            query = parse_qs(environ.get("QUERY_STRING", ""))
            filters, paging = parse_filters(query), parse_paging(query)
        except FilterError as error:
            return self._page(start_response, warehouse, view if view in VIEWS else "roi",
                              Filters(), pages.error_body(str(error)), "400 Bad Request")
        if view in VIEWS:  # one page of each table (PAGE_ROWS rows), totals over all
            body = pages.view_body(build_view(warehouse, view, filters, paging),
                                   resolve_model(warehouse, filters), paging)
            return self._page(start_response, warehouse, view, filters, body)
        return self._csv(start_response,  # every row
                         build_view(warehouse, TABLE_VIEWS[table], filters, EVERY_ROW),
                         table, filters)

    def _page(self, start_response: StartResponse, warehouse: Warehouse, view: str,
              filters: Filters, body: str, status: str = "200 OK") -> Iterable[bytes]:
        html = pages.page(view, resolve_model(warehouse, filters), options(warehouse), body,
                          self.source)
        return _respond(start_response, status, "text/html; charset=utf-8", html.encode())

    def _csv(self, start_response: StartResponse, view: View, name: str,
             filters: Filters) -> Iterable[bytes]:
        header: list[str] = []
        rows: list[tuple[Any, ...]] = []
        if not view.notice:  # a view without its source tables exports nothing, not an error
            table = view.table(name)
            header, rows = table.csv_header(), table.csv_rows()
        out = io.StringIO()
        writer = csv.writer(out)
        if header:
            writer.writerow(header)
        writer.writerows([[_csv_value(v) for v in row] for row in rows])
        suffix = "".join(f"_{v}" for v in (filters.date_from, filters.date_to) if v)
        return _respond(start_response, "200 OK", "text/csv; charset=utf-8",
                        out.getvalue().encode(),
                        [("Content-Disposition", f'attachment; filename="{name}{suffix}.csv"')])


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# a text cell a spreadsheet would evaluate as a formula (campaign names come from ad
# platforms and telemetry: anyone can name one "=HYPERLINK(...)")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

SECURITY_HEADERS = [
    # no script at all; the page's own stylesheet is inline, its charts inline SVG
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
     "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
]


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8050
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _csv_value(value: object) -> object:
    """15 significant digits: full precision less the noise of summing floats
    (6361.410000000001 -> 6361.41), so a spreadsheet re-sums what the page shows; None as
    an empty field; text a spreadsheet would run as a formula behind a quote."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return float(f"{value:.15g}") if isinstance(value, float) else value


def _respond(start_response: StartResponse, status: str, content_type: str, body: bytes,
             headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", content_type),
                            ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *SECURITY_HEADERS, *(headers or [])])
    return [body]



class DashboardServer:
    """waitress (pipelines/dashboard/server.py): its event loop holds idle and slow
    connections apart from a fixed pool of worker threads that run the app, and sheds them
    (a request must arrive whole within `request_timeout_s`, an idle connection is closed
    after `channel_timeout_s`, at the connection limit the longest waiting make room), so
    no client can hang the pages; each worker keeps its warehouse connection
    (DashboardApp)."""

    def __init__(self, app: DashboardApp, host: str, port: int, threads: int = WORKERS,
                 channel_timeout_s: int = CHANNEL_TIMEOUT_S,
                 connection_limit: int | None = None,
                 request_timeout_s: int = REQUEST_TIMEOUT_S) -> None:
        self._server = create_shedding_server(app, host, port, threads, connection_limit,
                                              channel_timeout_s, request_timeout_s)

    @property
    def server_port(self) -> int:
        return int(self._server.effective_port)

    @property
    def connection_limit(self) -> int:
        return int(self._server.adj.connection_limit)

    def serve_forever(self) -> None:
        self._server.run()

    def shutdown(self) -> None:
        self._server.close()

    def server_close(self) -> None:
        with contextlib.suppress(Exception):
            self._server.close()


def make_dashboard_server(warehouse_url: str, host: str = "127.0.0.1", port: int = 8050,
                          allowed_hosts: Iterable[str] = (), *,
                          connection_limit: int | None = None,
                          channel_timeout_s: int = CHANNEL_TIMEOUT_S,
                          request_timeout_s: int = REQUEST_TIMEOUT_S) -> DashboardServer:
    """A started-but-not-serving server (port 0 picks a free port: see server_port). Host
    headers allowed: loopback names, the bound address, and `allowed_hosts`. No
    connection_limit: as many as the open-files limit allows (server.py)."""
    bound = () if host in ("0.0.0.0", "::", "") else (host,)
    return DashboardServer(DashboardApp(warehouse_url, (*bound, *allowed_hosts)), host, port,
                           connection_limit=connection_limit,
                           channel_timeout_s=channel_timeout_s,
                           request_timeout_s=request_timeout_s)
