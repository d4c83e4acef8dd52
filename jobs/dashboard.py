"""`seedance dashboard`: serve the finance dashboard over the warehouse tables.

The warehouse is the job config's (`warehouse.url`, or SEEDANCE_WAREHOUSE_URL), or
`--warehouse URL`. The URL is only ever shown with its password replaced by ***.

Slow and idle connections are shed (pipelines/dashboard/server.py): the open-files limit
is raised to its hard limit at start and the connection limit sized to it, a request must
arrive whole within --request-timeout, an idle connection is closed after
--channel-timeout, and at the limit the connections waiting longest make room.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from jobs.commands.common import port_number, positive_int


@dataclass(frozen=True)
class DashboardRequest:
    warehouse_url: str
    host: str = "127.0.0.1"
    port: int = 8050
    allowed_hosts: tuple[str, ...] = ()
    connection_limit: int | None = None  # None: sized to the open-files limit
    channel_timeout_s: int = 30
    request_timeout_s: int = 10


def run(request: DashboardRequest) -> int:
    """Serve until interrupted. The warehouse is opened once first, so a wrong URL or a
    database that is down fails at start with the reason, not on the first page view."""
    from pipelines.dashboard.app import make_dashboard_server
    from pipelines.dashboard.server import raise_open_files_limit
    from pipelines.store.warehouse import Warehouse, redacted_url

    Warehouse(request.warehouse_url, create=False).close()
    raise_open_files_limit()
    server = make_dashboard_server(request.warehouse_url, request.host, request.port,
                                   request.allowed_hosts,
                                   connection_limit=request.connection_limit,
                                   channel_timeout_s=request.channel_timeout_s,
                                   request_timeout_s=request.request_timeout_s)
    print(f"Dashboard on http://{request.host}:{server.server_port}/ over "
          f"{redacted_url(request.warehouse_url)}, at most {server.connection_limit:,} "
          "connections (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dashboard", help="serve the finance dashboard (ROI, models, lifecycle, "
                                         "reconciliation, alerts, experiments, control) over "
                                         "the warehouse")
    p.add_argument("--config", help="job config YAML whose warehouse.url to read "
                                    "(default: jobs/config/streaming.yaml)")
    p.add_argument("--warehouse", metavar="URL",
                   help="warehouse URL, overrides the config (sqlite:///path or postgresql://...)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default loopback; 0.0.0.0 in a container)")
    p.add_argument("--port", type=port_number, default=8050)
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host name the dashboard answers (repeatable); loopback names and "
                        "the --host address always are. Behind a proxy: its public name")
    p.add_argument("--connection-limit", type=positive_int, metavar="N",
                   help="connections held open at most; at the limit the longest waiting "
                        "(no request in service) are closed to make room (default: as many "
                        "as the open-files limit allows, two descriptors each, at most "
                        "10,000)")
    p.add_argument("--channel-timeout", type=positive_int, default=30, metavar="SECONDS",
                   help="close a connection idle this long between requests (default 30)")
    p.add_argument("--request-timeout", type=positive_int, default=10, metavar="SECONDS",
                   help="close a connection whose request is not whole this long after its "
                        "first byte, however steadily it trickles (default 10)")
    p.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    # imported here: every `seedance` command builds this parser, few serve the dashboard
    from pipelines.dashboard.tables import RatioRule, set_ratio_rule
    from pipelines.settings.job_config import load_config
    from pipelines.store.warehouse import Warehouse

    config = load_config(Path(args.config) if args.config else None)
    # ratios under the job's rule: no ratio under roi.min_cost, ROI at roi.gross_margin
    set_ratio_rule(RatioRule(config.roi.min_cost, config.roi.gross_margin))
    url = args.warehouse or config.warehouse.url
    return run(DashboardRequest(url or Warehouse().url, args.host, args.port,
                                tuple(args.allowed_host), args.connection_limit,
                                args.channel_timeout, args.request_timeout))
