"""What `seedance report` and the demo print from the warehouse: credited revenue per channel
and model, ROI per channel, GPU cost per workload, and the experiments' strategy table."""

from __future__ import annotations

from pipelines.settings.job_config import StreamingJobConfig
from pipelines.store import summaries
from pipelines.store.experiments import experiment_inputs, store_results
from pipelines.store.warehouse import Warehouse
from udfs import ratios
from udfs.experiments import ExperimentsFailed, strategy_table, window_statistics


def _short(model: str) -> str:
    return {"shapley_simplified": "shapley_simpl", "position_based": "position"}.get(model, model)


def print_summary(warehouse: Warehouse) -> None:
    summary = summaries.channel_summary(warehouse)
    models = sorted({row[0] for row in summary})
    channels = sorted({row[1] for row in summary})
    revenue = {(m, c): rev for m, c, _, rev in summary}
    header = f"{'channel':16}" + "".join(f"{_short(m):>14}" for m in models)
    print("\nCredited revenue per channel, by attribution model")
    print(header)
    print("-" * len(header))
    for channel in sorted(channels, key=lambda c: -revenue.get((models[0], c), 0.0)):
        print(f"{channel:16}" + "".join(f"{revenue.get((m, channel), 0.0):14,.2f}"
                                        for m in models))
    print("-" * len(header))
    totals = {m: (o, c, r) for m, o, c, r in summaries.totals(warehouse)}
    print(f"{'total':16}" + "".join(f"{totals[m][2]:14,.2f}" for m in models))
    print(f"{'conversions':16}" + "".join(f"{totals[m][1]:14,.2f}" for m in models))
    stages = summaries.stage_summary(warehouse)
    print("Orders by lifecycle stage: " + ", ".join(
        f"{stage} {orders}" for model, stage, orders, _ in stages if model == models[0]))


def _ratio(value: float | str | None, width: int) -> str:
    return f"{'-' if value is None else value:>{width}}" if not isinstance(value, float) \
        else f"{value:{width},.2f}"


def print_roi_summary(warehouse: Warehouse, models: tuple[str, ...] = ("last_click", "linear",
                                                                      "shapley", "markov"),
                      gross_margin: float = ratios.GROSS_MARGIN,
                      min_cost: float = ratios.MIN_COST) -> None:
    rows = summaries.roi_summary(warehouse, "channel")
    if not rows:
        return
    print(f"\nROI (revenue / cost) per channel over the whole period, cost = ad spend + GPU "
          f"compute (fully loaded); '-': cost under {min_cost:,.2f}; '{ratios.COMPUTE_ONLY}': "
          "no ad spend, only compute")
    print(f"{'channel':16}" + "".join(f"{m:>14}" for m in models) + f"{'ad spend':>12}"
          f"{'compute':>10}")
    by_key = {(m, k): (rev, spend, compute) for m, k, rev, spend, compute in rows}
    for channel in sorted({k for _, k in by_key}):
        figures = [_ratio(ratios.cost_ratios(*by_key.get((model, channel), (0.0, 0.0, 0.0)),
                                      gross_margin, min_cost)[0], 14) for model in models]
        _, spend, compute = by_key.get((models[0], channel), (0.0, 0.0, 0.0))
        print(f"{channel:16}" + "".join(figures) + f"{spend:12,.2f}{compute:10,.4f}")
    print(f"\nAs finance reads it ({models[0]}): ROAS = revenue / ad spend, margin ROI = "
          f"(revenue x gross margin - cost) / cost at {ratios.gross_margin_text(gross_margin)}")
    print(f"{'channel':16}{'revenue':>12}{'ad spend':>12}{'compute':>10}{'ROI':>14}"
          f"{'ROAS':>8}{'Margin ROI':>14}")
    for channel in sorted({k for _, k in by_key}):
        rev, spend, compute = by_key.get((models[0], channel), (0.0, 0.0, 0.0))
        roi, roas, margin_roi = ratios.cost_ratios(rev, spend, compute, gross_margin, min_cost)
        print(f"{channel:16}{rev:12,.2f}{spend:12,.2f}{compute:10,.2f}{_ratio(roi, 14)}"
              f"{_ratio(roas, 8)}{_ratio(margin_roi, 14)}")
    unallocated = summaries.unallocated_by_kind(warehouse, models[0])
    if unallocated:
        print(f"Unallocated under {models[0]}: " + ", ".join(
            f"{kind} ${amount:,.2f}" for kind, amount in unallocated)
            + " (no credited conversion of that campaign that day / GPU work outside journeys)")


def print_gpu_summary(warehouse: Warehouse) -> None:
    summary = summaries.gpu_cost_summary(warehouse)
    print("\nGPU compute cost per workload")
    for namespace, workload, seconds, usd in summary["per_workload"]:  # type: ignore[union-attr]
        print(f"  {namespace + '/' if namespace else ''}{workload:24} {seconds:10.1f} GPU-s "
              f"  ${usd:,.4f}")
    print("Costliest traces")
    for trace_id, user, usd in summary["top_traces"]:  # type: ignore[union-attr]
        print(f"  {trace_id}  {user:12} ${usd:,.6f}")
    print("Idle cost per GPU")
    for uuid, model, seconds, usd in summary["idle_per_gpu"]:  # type: ignore[union-attr]
        print(f"  {uuid} {model:22} {seconds:10.0f} s   ${usd:,.4f}")
    allocated, idle, total = (summary["allocated_usd"], summary["idle_usd"],
                              summary["interval_usd"])
    print("Idle cost shared over workloads by their allocated cost (as OpenCost does)")
    for workload, usd in summary["idle_shared"]:  # type: ignore[union-attr]
        print(f"  {workload:24} ${usd:,.4f}")
    print(f"Allocated ${allocated:,.4f} + idle ${idle:,.4f} = ${allocated + idle:,.4f}; "
          f"sampled GPU time cost ${total:,.4f}")


def print_experiments(warehouse: Warehouse, config: StreamingJobConfig) -> None:
    """The strategy table over the last `experiments.window_days` of the data (as
    `seedance experiments` prints it), stored for the dashboard."""
    settings = config.experiments
    inputs = experiment_inputs(warehouse, config.experiment_cost_model,
                               holdouts=config.incrementality.holdout_prefix)
    day = inputs.last_day
    if day is None:
        return
    failures: dict[str, str] = {}
    try:
        stats = window_statistics(inputs.exposures, inputs.conversions, day,
                                  int(settings.window_days),
                                  control=settings.control_variant or None,
                                  alpha=settings.alpha, min_converters=settings.min_converters)
    except ExperimentsFailed as error:  # the others' results still stand
        stats, failures = error.computed, error.failures
    store_results(warehouse, stats)
    print(f"\nExperiments: {int(settings.window_days)}-day ROI per variant = revenue / (ad "
          f"spend + GPU compute) of its exposed users (costs allocated by "
          f"{config.experiment_cost_model}), intervals at {100 * (1 - settings.alpha):g} %")
    print(strategy_table(stats))
    for flag, reason in failures.items():
        print(f"experiment {flag} not computed: {reason}")
