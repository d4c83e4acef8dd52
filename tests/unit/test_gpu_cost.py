"""GPU cost arithmetic on hand-computed cases."""

import math

import pytest

from schemas.gpu import GpuSample, Price, PriceCatalog, load_catalog, sample_problem
from schemas.records import GpuCall
from udfs.roi.gpu_cost import allocate_gpu, cost_by, share_idle, totals_by_gpu

S = 1000
H100 = "NVIDIA H100 80GB HBM3"
CATALOG = PriceCatalog((Price("H100", "on_demand", 6.98, 0),), fallback_usd_per_hour=4.0)


def sample(ts, util=50.0, pod="", model=H100, uuid="GPU-1", **kw):
    values = dict(ts_ms=ts, gpu_uuid=uuid, model=model, hostname="node-1", pod=pod,
                  namespace="ml", util_pct=util, mem_copy_util_pct=10.0, fb_used_mib=1000.0,
                  fb_free_mib=1000.0, power_w=300.0, energy_mj=1.0)
    values.update(kw)
    return GpuSample(**values)


def call(span, start, end, pod="ranker-0", workload="ranker", trace="t1", user="u1"):
    return GpuCall(trace, span, start, end, user, "GPU-1", pod, "ml", workload)


def allocate(samples, calls, catalog=CATALOG):
    return allocate_gpu(samples, calls, catalog, nominal_interval_ms=60 * S, max_gap_ms=120 * S)


def test_shared_gpu_splits_by_overlap_and_leaves_the_rest_idle():
    minute = 6.98 / 60
    out = allocate([sample(60 * S), sample(120 * S)],
                   [call("a", 0, 60 * S), call("b", 30 * S, 90 * S)])
    got = {c.span_id: c.cost_usd for c in out.calls}
    assert got["a"] == pytest.approx(minute * 2 / 3, rel=1e-12)
    assert got["b"] == pytest.approx(minute / 3 + minute / 2, rel=1e-12)
    assert sum(i.cost_usd for i in out.idle) == pytest.approx(minute / 2, rel=1e-12)
    assert {c.span_id: c.gpu_seconds for c in out.calls} == {"a": 60.0, "b": 60.0}
    # conservation: allocated + idle = what the GPU cost
    allocated = sum(c.cost_usd for c in out.calls)
    assert allocated + sum(i.cost_usd for i in out.idle) == pytest.approx(2 * minute, rel=1e-12)
    assert out.total_usd == pytest.approx(2 * minute, rel=1e-12)


def test_idle_gpu_is_all_idle_cost():
    out = allocate([sample(60 * S, util=0.0), sample(120 * S, util=0.0)], [])
    assert out.calls == []
    assert sum(i.idle_seconds for i in out.idle) == 120.0
    assert sum(i.cost_usd for i in out.idle) == pytest.approx(6.98 / 30, rel=1e-12)


def test_price_change_mid_interval_is_cut_at_the_change():
    catalog = PriceCatalog((Price("H100", "on_demand", 2.0, 0),
                            Price("H100", "on_demand", 4.0, 30 * S)), 9.0)
    out = allocate([sample(60 * S)], [call("a", 0, 60 * S)], catalog)
    assert out.calls[0].cost_usd == pytest.approx(2.0 * 30 / 3600 + 4.0 * 30 / 3600, rel=1e-12)
    assert out.idle == []


def test_missing_samples_leave_unobserved_time_uncosted():
    out = allocate([sample(60 * S), sample(120 * S), sample(600 * S)], [])
    assert out.unobserved_ms == 420 * S
    assert sum(i.idle_seconds for i in out.idle) == 180.0
    assert out.total_usd == pytest.approx(6.98 * 3 / 60, rel=1e-12)


def test_gpu_shared_by_two_pods_is_split_by_their_utilisation():
    samples = [sample(60 * S, util=75.0, pod="p1"), sample(60 * S, util=25.0, pod="p2")]
    out = allocate(samples, [call("x", 0, 60 * S, pod="p1", workload="w1"),
                             call("y", 0, 60 * S, pod="p2", workload="w2")])
    got = {c.span_id: c.cost_usd for c in out.calls}
    assert got["x"] == pytest.approx(3 * got["y"], rel=1e-12)
    assert got["x"] + got["y"] == pytest.approx(6.98 / 60, rel=1e-12)


def test_unknown_gpu_model_is_priced_at_the_fallback_and_flagged():
    out = allocate([sample(60 * S, model="Mystery X9")], [call("a", 0, 30 * S)])
    (c,) = out.calls
    assert c.cost_usd == pytest.approx(4.0 / 120, rel=1e-12) and c.price_known is False
    assert out.idle[0].price_known is False


def test_costs_roll_up_per_trace_and_workload_and_idle_is_shared_out():
    out = allocate([sample(60 * S), sample(120 * S)],
                   [call("a", 0, 30 * S, trace="t1", workload="ranker"),
                    call("b", 0, 30 * S, trace="t2", workload="recsys", pod="rec-0")])
    per_trace = cost_by(out.calls, "trace_id")
    assert per_trace["t1"] == pytest.approx(per_trace["t2"])
    idle_total = sum(i.cost_usd for i in out.idle)
    shares = share_idle(*totals_by_gpu(out.calls, out.idle))
    assert shares == pytest.approx({"ranker": idle_total / 2, "recsys": idle_total / 2})
    assert math.isclose(sum(per_trace.values()) + sum(shares.values()), out.total_usd,
                        rel_tol=1e-12)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"util_pct": 130.0}, "util_pct is above 100 %"),
    ({"power_w": -1.0}, "power_w is negative"),
    ({"fb_used_mib": float("nan")}, "fb_used_mib is not a finite number"),
    ({"power_w": 950.0}, "power_w 950.0 is above the 800 W limit"),
    ({"gpu_uuid": ""}, "gpu uuid is missing"),
    ({"pricing_class": "free"}, "pricing_class must be one of"),
    # labels are stored as text everywhere: the span decoders' rule
    ({"pod": "ranker-\x00-0"}, "pod holds the control character U+0000 at 7"),
    ({"hostname": "node\x1b[2J"}, "hostname holds the control character U+001B at 4"),
    ({"namespace": "n" * 257}, "namespace is longer than 256 characters"),
    ({"model": "NVIDIA\x9fH100"}, "model holds the control character U+009F at 6"),
])
def test_impossible_readings_are_named(changes, reason):
    assert reason in sample_problem(sample(1, **changes))
    assert sample_problem(sample(1)) is None


def test_shipped_catalog_has_every_example_gpu_and_class():
    catalog = load_catalog()
    families = {(p.family, p.pricing_class) for p in catalog.prices}
    for gpu in ("A100", "L40S", "H100", "H200"):
        for pricing_class in ("on_demand", "spot", "reserved"):
            assert (gpu, pricing_class) in families
    (segment,) = catalog.segments("NVIDIA H200", "spot", 1_800_000_000_000, 1_800_000_060_000)
    assert segment[2] == 3.70 and segment[3] is True


def test_idle_of_a_gpu_without_workloads_stays_idle_and_shares_add_up():
    shares = share_idle({"g1": {"a": 3.0, "b": 1.0}}, {"g1": 8.0, "g2": 5.0})
    assert shares == pytest.approx({"a": 6.0, "b": 2.0, "(idle)": 5.0})
