"""`seedance dashboard`: serve the finance dashboard over the warehouse tables.

The warehouse is the job config's (`warehouse.url`, or SEEDANCE_WAREHOUSE_URL), or
`--warehouse URL`. The URL is only ever shown with its password replaced by ***.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from jobs.commands.common import port_number


@dataclass(frozen=True)
class DashboardRequest:
    warehouse_url: str
    host: str = "127.0.0.1"
    port: int = 8050
    allowed_hosts: tuple[str, ...] = ()


def run(request: DashboardRequest) -> int:
    """Serve until interrupted. The warehouse is opened once first, so a wrong URL or a
    database that is down fails at start with the reason, not on the first page view."""
    from pipelines.dashboard.app import make_dashboard_server
    from pipelines.store.warehouse import Warehouse, redacted_url

    Warehouse(request.warehouse_url).close()
    server = make_dashboard_server(request.warehouse_url, request.host, request.port,
                                   request.allowed_hosts)
    print(f"Dashboard on http://{request.host}:{server.server_port}/ over "
          f"{redacted_url(request.warehouse_url)} (Ctrl-C to stop)", flush=True)
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
                                tuple(args.allowed_host)))
