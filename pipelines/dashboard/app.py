"""The dashboard as a WSGI application, and a small threaded server for it (stdlib only).

Routes: `/` (to the ROI view), `/<view>` (HTML), `/csv/<table>.csv` (the rows a table shows,
same filters), `/healthz` (the warehouse answers). Read-only: only GET and HEAD.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg

from pipelines.dashboard import pages
from pipelines.dashboard.filters import FilterError, Filters, parse_filters
from pipelines.dashboard.queries import VIEWS, build_view, options, resolve_model
from pipelines.dashboard.tables import View
from pipelines.warehouse import Warehouse, WarehouseError, redacted_url

log = logging.getLogger("seedance.dashboard")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

# which view holds each exported table (a CSV is built from the same view as its page)
TABLE_VIEWS = {
    "roi_by_channel": "roi", "roi_by_campaign": "roi", "roi_by_day": "roi",
    "models_summary": "models", "models_revenue": "models", "models_roi": "models",
    "stage_allocation": "stages", "recon_breaches": "reconciliation",
    "recon_rows": "reconciliation", "alerts_open": "alerts", "alerts_resolved": "alerts"}


class DashboardApp:
    """Each worker thread keeps one warehouse connection and reuses it: SQLite connections
    belong to the thread that opened them, and opening a Warehouse applies the schema's
    DDL, which a page view should not repeat. A connection that failed is dropped, so the
    next request reconnects (e.g. after a database restart)."""

    def __init__(self, warehouse_url: str) -> None:
        self.warehouse_url = warehouse_url
        self.source = redacted_url(warehouse_url)  # the only form of the URL ever shown
        self._local = threading.local()

    def _warehouse(self) -> Warehouse:
        warehouse: Warehouse | None = getattr(self._local, "warehouse", None)
        if warehouse is None:
            warehouse = self._local.warehouse = Warehouse(self.warehouse_url)
        return warehouse

    def _drop_warehouse(self) -> None:
        warehouse = getattr(self._local, "warehouse", None)
        self._local.warehouse = None
        if warehouse is not None:
            with contextlib.suppress(Exception):
                warehouse.close()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
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
        try:
            return self._route(start_response, warehouse, environ, path, view, table)
        except (sqlite3.Error, psycopg.Error):
            self._drop_warehouse()
            raise

    def _route(self, start_response: StartResponse, warehouse: Warehouse,
               environ: dict[str, Any], path: str, view: str, table: str) -> Iterable[bytes]:
        if path == "/healthz":
            warehouse.query("SELECT 1")
            return _respond(start_response, "200 OK", "text/plain", b"ok\n")
        try:
            filters = parse_filters(parse_qs(environ.get("QUERY_STRING", "")))
        except FilterError as error:
            return self._page(start_response, warehouse, view if view in VIEWS else "roi",
                              Filters(), pages.error_body(str(error)), "400 Bad Request")
        if view in VIEWS:
            body = pages.view_body(build_view(warehouse, view, filters),
                                   resolve_model(warehouse, filters))
            return self._page(start_response, warehouse, view, filters, body)
        return self._csv(start_response, build_view(warehouse, TABLE_VIEWS[table], filters),
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
            header, rows = [c.name for c in table.columns], table.rows
        out = io.StringIO()
        writer = csv.writer(out)
        if header:
            writer.writerow(header)
        writer.writerows([[_csv_value(v) for v in row] for row in rows])
        suffix = "".join(f"_{v}" for v in (filters.date_from, filters.date_to) if v)
        return _respond(start_response, "200 OK", "text/csv; charset=utf-8",
                        out.getvalue().encode(),
                        [("Content-Disposition", f'attachment; filename="{name}{suffix}.csv"')])


def _csv_value(value: object) -> object:
    """15 significant digits: full precision less the noise of summing floats
    (6361.410000000001 -> 6361.41), so a spreadsheet re-sums what the page shows; None as
    an empty field."""
    if value is None:
        return ""
    return float(f"{value:.15g}") if isinstance(value, float) else value


def _respond(start_response: StartResponse, status: str, content_type: str, body: bytes,
             headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", content_type),
                            ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *(headers or [])])
    return [body]


class _PooledServer(WSGIServer):
    """Requests handled by a fixed pool of threads: each keeps its warehouse connection
    (DashboardApp), and a burst of requests cannot open unbounded connections."""

    workers = 4

    def server_activate(self) -> None:
        super().server_activate()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dashboard")

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._handle, request, client_address)

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        if hasattr(self, "_pool"):
            self._pool.shutdown(wait=False, cancel_futures=True)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        log.info("%s %s", self.address_string(), format % args)


def make_dashboard_server(warehouse_url: str, host: str = "127.0.0.1",
                          port: int = 8050) -> WSGIServer:
    """A started-but-not-serving server (port 0 picks a free port: see server_port)."""
    return make_server(host, port, DashboardApp(warehouse_url), server_class=_PooledServer,
                       handler_class=_QuietHandler)
