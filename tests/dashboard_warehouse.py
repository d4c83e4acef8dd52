"""Rows of the dashboard tests' hand-made warehouse, built by hand (the fixtures that store
them, `url`, `warehouse` and `loop`, are tests/unit/conftest.py's), and `call`, a WSGI
request to the app without a server."""

from __future__ import annotations

from pathlib import Path
from wsgiref.util import setup_testing_defaults

from pipelines.dashboard.app import DashboardApp
from schemas.rows import CONTROL_DECISION, CREDIT_INTERVAL, EXPERIMENT_RESULT, GPU_CALL_COST, Row

RECONCILIATION_DDL = Path(__file__).resolve().parents[1] / "schemas" / "sql" / "reconciliation.sql"


def roi_row(model: str, day: str, dimension: str, key: str, conversions: float, revenue: float,
            ad_spend: float, compute: float) -> tuple[object, ...]:
    cost = ad_spend + compute
    return (model, day, dimension, key, conversions, revenue, ad_spend, compute,
            revenue / cost if cost >= 1 else None, "USD",
            revenue / ad_spend if ad_spend >= 1 else None,
            (revenue - cost) / cost if cost >= 1 else None)


def recon(day: str, scope: str, platform: str, entity: str, metric: str, ours: float,
          theirs: float, status: str) -> tuple[object, ...]:
    return (scope, platform, "acc" if scope == "campaign" else "*", entity, day, metric, "USD",
            ours, theirs, ours - theirs, (ours - theirs) / theirs, 0.05, 10.0, status, "[]",
            "file.csv:2", f"{day}T23:00:00Z")


def call(app: DashboardApp, path: str, query: str = "") -> tuple[str, dict[str, str], str]:
    environ: dict[str, object] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, QUERY_STRING=query)
    seen: dict[str, object] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen.update(status=status, headers=dict(headers))

    body = b"".join(app(environ, start_response)).decode()
    return str(seen["status"]), seen["headers"], body  # type: ignore[return-value]


def declared(row: Row, **values: object) -> tuple[object, ...]:
    """A row of `row`'s table from its column names (every column given)."""
    assert set(values) == set(row.names), set(row.names) ^ set(values)
    return tuple(values[name] for name in row.names)


def result(flag_key: str, variant: str, window_end: str, roi: tuple[float, float, float],
           diff: tuple[float | None, float | None, float | None] = (None, None, None),
           p_value: float | None = None, significant: bool = False, srm_p: float = 0.5,
           users: int = 1000, control: str = "control", note: str = "") -> tuple[object, ...]:
    is_control = variant == control
    return declared(
        EXPERIMENT_RESULT, flag_key=flag_key, variant=variant, window_end=window_end,
        window_start="2026-10-08" if window_end == "2026-10-14" else "2026-10-01",
        is_control=is_control, control_variant=control, users=users, converters=users // 10,
        conversions=users // 8, revenue=roi[0] * 100.0, ad_spend=80.0, compute_cost=20.0,
        roi=roi[0], roi_low=roi[1], roi_high=roi[2], roi_diff=diff[0], diff_low=diff[1],
        diff_high=diff[2], p_value=p_value, significant=significant,
        marginal_cost=None if is_control else 0.12, srm_p_value=srm_p, srm=srm_p < 0.001,
        confidence=0.95, computed_at="2026-10-15T06:00:00+00:00", heavy_tail=False, note=note)


def interval(model: str, period: str, channel: str, share: tuple[float, float, float],
             credit: float) -> tuple[object, ...]:
    return declared(
        CREDIT_INTERVAL, model=model, period=period, channel=channel, credit=credit,
        credit_low=credit * 0.9, credit_high=credit * 1.1, revenue=credit * 50,
        revenue_low=credit * 45, revenue_high=credit * 55, share=share[0], share_low=share[1],
        share_high=share[2], level=0.95, resamples=1000, seed=7,
        computed_at="2026-10-03T01:00:00+00:00")


def decision(decision_id: str, rule: str, target: str, status: str, decided_at: str,
             blocked_by: str = "", mode: str = "auto", action: str = "budget_change",
             reason: str = "ROI 0.8 below 1.0 for 3 days") -> tuple[object, ...]:
    return declared(
        CONTROL_DECISION, decision_id=decision_id, rule=rule, target=target, action=action,
        parameters='{"percent": -20}', reason=reason, status=status, blocked_by=blocked_by,
        mode=mode, baseline=1.5, decided_at=decided_at)


D1 = 1_790_899_200_000  # 2026-10-02 00:00 UTC
H = 3_600_000


def call_row(gpu: str, end: int, trace: str, workload: str, seconds: float,
             cost: float) -> tuple[object, ...]:
    values = {"gpu_uuid": gpu, "interval_end_ms": end, "trace_id": trace, "span_id": trace,
              "interval_start_ms": end - 10_000, "model": "NVIDIA A100", "workload": workload,
              "pod": "p", "namespace": "shop", "user_id": "u", "gpu_seconds": seconds,
              "cost_usd": cost, "interval_cost_usd": cost, "price_known": True}
    return tuple(values[name] for name in GPU_CALL_COST.names)


def idle_row(gpu: str, end: int, cost: float) -> tuple[object, ...]:
    return (gpu, end, end - 10_000, "NVIDIA A100", 10.0, cost, cost, True)
