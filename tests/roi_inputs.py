"""The ROI job's test input: ten days of a shop's credits, conversions, GPU costs and
(restated) spend from a seed, the backfill's rows for them, and the roi topic read as a
changelog (tests/integration/test_roi_determinism.py, test_flink_cluster.py)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipelines.backfill.roi import link_costs, loaded_costs, order_scores, roi_rows
from pipelines.codec import credit_messages, table_messages
from pipelines.ltv.models_topic import ModelMessage
from pipelines.settings.job_config import StreamingJobConfig
from schemas import rows
from tests.job_io import messages
from udfs.ltv.allocation import tallies_of
from udfs.ltv.model import LtvModel
from udfs.ltv.tally import summaries_of
from udfs.periods import DAY_MS, day_of

T0 = 1_788_220_800_000  # 2026-09-01 00:00 UTC
CHANNELS = {"search": "search-brand", "display": "display-retarget", "email": "email-weekly",
            "social": "social-video"}
MODELS = ("last_click", "linear")
# (one id with a tab: a metrics label passes it on, and it must not break the GPU-day key)
GPUS = ("GPU-a100-0", "GPU-l40s\t1", "GPU-spare-2")


class Inputs:
    """Ten days of a shop's ROI inputs, from a seed."""

    def __init__(self, seed: int, orders: int = 240, users: int | None = None) -> None:
        """`users`: the orders spread over that many customers (repeat buyers; by a
        second generator, so the rest is the same), else one customer each."""
        rng = random.Random(seed)
        buyers = random.Random(seed + 1)
        self.credits: list[tuple[Any, ...]] = []
        self.conversions: list[tuple[Any, ...]] = []
        self.costs: list[dict[str, Any]] = []
        self.spend: list[dict[str, Any]] = []
        for n in range(orders):
            ts = T0 + rng.randrange(10 * DAY_MS)
            order, revenue = f"o{n:04d}", round(rng.uniform(5, 200), 2)
            stage = rng.choice(("new", "repeat", "winback"))
            journey = [rng.choice(list(CHANNELS)) for _ in range(rng.randint(1, 4))]
            traces = [f"t{n:04d}-{i}" for i in range(len(journey) + 1)]
            user = f"u{n}" if users is None else f"u{buyers.randrange(users)}"
            for model in MODELS:
                shares = [0.0] * (len(journey) - 1) + [1.0] if model == "last_click" \
                    else [1 / len(journey)] * len(journey)
                for i, (channel, share) in enumerate(zip(journey, shares, strict=True)):
                    self.credits.append((model, order, user, ts, i, channel,
                                         CHANNELS[channel], ts - (len(journey) - i) * 3600_000,
                                         share, share * revenue, "USD", stage))
            self.conversions.append((order, user, ts, revenue, "USD", stage, len(journey),
                                     traces))
            for trace in rng.sample(traces, rng.randint(0, 2)):
                # mostly near the order; some more than the link window (1 day) away
                offset = rng.choice((-600_000, 300_000, -2 * DAY_MS, 3 * DAY_MS))
                self.costs.append({"kind": "call", "gpu_uuid": rng.choice(GPUS[:2]),
                                   "trace_id": trace, "interval_end_ms": ts + offset,
                                   "cost_usd": round(rng.uniform(0.01, 3), 4)})
        for n in range(40):  # GPU calls no trace of a journey carried
            self.costs.append({"kind": "call", "gpu_uuid": rng.choice(GPUS[:2]),
                               "trace_id": f"lone-{n}" if n % 2 else "",
                               "interval_end_ms": T0 + rng.randrange(10 * DAY_MS),
                               "cost_usd": round(rng.uniform(0.01, 3), 4)})
        # idle time of every GPU; the third serves no call: its idle cost stays its own
        for day in range(-3, 14):
            for gpu in GPUS:
                for _ in range(rng.randint(1, 3)):
                    self.costs.append({"kind": "idle", "gpu_uuid": gpu,
                                       "interval_end_ms": T0 + day * DAY_MS
                                       + rng.randrange(DAY_MS),
                                       "cost_usd": round(rng.uniform(0.5, 20), 4)})
        for day in range(10):
            for campaign in (*CHANNELS.values(), "brand-awareness"):
                record = {"platform": "google_ads", "account": "1", "campaign": campaign,
                          "day": day_of(T0 + day * DAY_MS), "amount": 0.0, "currency": "USD"}
                for _ in range(rng.choice((1, 1, 2))):  # some restated
                    self.spend.append({**record, "amount": round(rng.uniform(10, 300), 2)})

    def expected(self, config: StreamingJobConfig) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        """The backfill's rows for the same input: {(kind, *key): row} (compute fully
        loaded or direct, as the config says)."""
        settings = config.computation
        credits = pd.DataFrame(self.credits, columns=rows.CREDIT.names)
        credits["day"] = [day_of(ts) for ts in credits.conversion_ts_ms]
        claims = pd.DataFrame([(trace, order, ts) for order, _, ts, *_, traces
                               in self.conversions for trace in traces],
                              columns=["trace_id", "order_id", "conversion_ts_ms"])
        calls = pd.DataFrame([(c["gpu_uuid"], c["trace_id"], c["interval_end_ms"],
                               c["cost_usd"]) for c in self.costs if c["kind"] == "call"],
                             columns=["gpu_uuid", "trace_id", "ts_ms", "cost"])
        idle = pd.DataFrame([(c["gpu_uuid"], c["interval_end_ms"], c["cost_usd"])
                             for c in self.costs if c["kind"] == "idle"],
                            columns=["gpu_uuid", "ts_ms", "cost"])
        costs = loaded_costs(calls, idle if settings.fully_loaded else None)
        latest_spend = {(s["platform"], s["account"], s["campaign"], s["day"]): s["amount"]
                        for s in self.spend}
        spend = pd.DataFrame([(*key, amount) for key, amount in latest_spend.items()],
                             columns=["platform", "account", "campaign", "day", "amount"])
        days = sorted(set(credits.day) | set(spend.day)
                      | {day_of(c["interval_end_ms"]) for c in self.costs})
        compute, unlinked = link_costs(costs, claims, settings, days)
        scores = order_scores(self.orders(), settings)
        expected: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for day in days:
            out = roi_rows(day, credits[credits.day == day], spend[spend.day == day],
                           compute[compute.day == day],
                           unlinked[unlinked.day == day].groupby("key").cost.sum().to_dict(),
                           settings, config.experiment_cost_model, scores)
            for kind, row, found in (("roi", rows.ROI_DAILY, out.roi),
                                     ("unallocated", rows.ROI_UNALLOCATED, out.unallocated),
                                     ("order_cost", rows.ORDER_COST, out.orders),
                                     ("order_segment", rows.ORDER_SEGMENT,
                                      out.segments or [])):
                for values in found:
                    expected[(kind, *values[:len(row.key)])] = values
        return expected


    def orders(self) -> pd.DataFrame:
        """order_id, user_id, ts_ms, revenue of every order."""
        return pd.DataFrame([c[:4] for c in self.conversions],
                            columns=["order_id", "user_id", "ts_ms", "revenue"])

    def allocation_model(self, path: Path, model: LtvModel) -> Path:
        """A model message for cost allocation by LTV segment, its bounds the quartiles of
        the orders' values as of their days, written to `path`."""
        values = []
        users = tallies_of(self.orders())
        for _, user, ts, *_ in self.conversions:
            _, summaries = summaries_of({user: users[user]}, ts // DAY_MS, model.period_days)
            values.append(float(model.lifetime_value(summaries, 365 / model.period_days)[0]))
        bounds = tuple(float(b) for b in np.quantile(values, (0.25, 0.5, 0.75)))
        path.write_text(ModelMessage(model, 365, 0.0, bounds).to_json())
        return path


def final_rows(kafka: str, topic: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The roi topic read as a changelog: the last row per key (a zero unallocated row,
    or a row marked withdrawn, withdraws its key)."""
    layouts = {"roi": rows.ROI_DAILY, "unallocated": rows.ROI_UNALLOCATED,
               "order_cost": rows.ORDER_COST, "order_segment": rows.ORDER_SEGMENT}
    current: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for message in messages(kafka, topic):
        if message["kind"] == "day_closed":  # when the job closed a day: no result row
            continue
        layout = layouts[message["kind"]]
        values = tuple(message[name] for name in layout.names)
        key = (message["kind"], *values[:len(layout.key)])
        current[key] = values
        if message.get("withdrawn"):
            del current[key]
    return {k: v for k, v in current.items()
            if not (k[0] == "unallocated" and v[rows.ROI_UNALLOCATED.names.index("amount")]
                    == 0)}


def same_rows(got: dict, expected: dict) -> list[str]:
    """Differences, one line each (numbers within 1e-9 relative, 1e-9 absolute)."""
    out = [f"missing {k}" for k in expected.keys() - got.keys()]
    out += [f"extra {k}: {got[k]}" for k in got.keys() - expected.keys()]
    for key in expected.keys() & got.keys():
        for a, b in zip(got[key], expected[key], strict=True):
            if isinstance(b, float) or isinstance(a, float):
                if a is None or b is None or not math.isclose(a, b, rel_tol=1e-9,
                                                              abs_tol=1e-9):
                    out.append(f"{key}: {got[key]} != {expected[key]}")
                    break
            elif a != b:
                out.append(f"{key}: {got[key]} != {expected[key]}")
                break
    return sorted(out)


@contextmanager
def cpu_hog() -> Iterator[None]:
    """A busy loop per core beside the job, as on a machine with other work."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()




def input_values(config: StreamingJobConfig, inputs: Inputs, rng: random.Random | None,
                 costs_first: bool) -> list[tuple[str, list[tuple[bytes | None, bytes]]]]:
    """(topic, [(key, message)]) of the credits, conversions and GPU costs, in the order to
    publish them: shuffled within a topic with `rng` (a later day's credits before an
    earlier day's), costs first with `costs_first` (every cost waits for its claim).
    Every fifth credit message is preceded by a stale version of the same conversions (as
    before late events corrected them: all the credit on a channel of their own); both
    carry the key of their first order, so they share a partition, in order, as the
    attribution job's versions do."""
    # two conversions' rows a message: a conversion's rows under a model travel together
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for credit in inputs.credits:
        groups.setdefault(credit[:2], []).append(credit)
    runs = list(groups.values())
    chunks = [[row for run in runs[i:i + 2] for row in run] for i in range(0, len(runs), 2)]
    credit_values = [(chunk[0][1].encode(), credit_messages.encode(chunk).encode())
                     for chunk in chunks]
    conversion_values = [(None, table_messages.encode_bytes(rows.CONVERSION.names, [c]))
                         for c in inputs.conversions]
    cost_values = [(None, json.dumps(c).encode()) for c in inputs.costs]
    if rng:
        for values in (credit_values, conversion_values, cost_values):
            rng.shuffle(values)
    with_stale = []
    for at, (key, value) in enumerate(credit_values):
        if at % 5 == 0:
            with_stale.append((key, credit_messages.encode(_stale(
                credit_messages.decode(value))).encode()))
        with_stale.append((key, value))
    topics = [(config.topics.credits, with_stale),
              (config.topics.conversions, conversion_values),
              (config.gpu.costs_topic, cost_values)]
    if costs_first:
        topics.reverse()
    return topics


def _stale(credits: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """An earlier version of these conversions' credits: one row each, all the credit and
    revenue on a channel of its own."""
    firsts: dict[tuple[str, str], dict[str, Any]] = {}
    for row in credits:
        firsts.setdefault((row["model"], row["order_id"]), row)
    revenue = {key: sum(r["revenue"] for r in credits if (r["model"], r["order_id"]) == key)
               for key in firsts}
    return [tuple({**row, "touch_index": 0, "channel": "stale", "campaign": "stale",
                   "credit": 1.0, "revenue": revenue[key]}[name] for name in rows.CREDIT.names)
            for key, row in firsts.items()]


def spend_values(inputs: Inputs) -> list[bytes]:
    """The spend records in their own order: a restatement follows the record it restates."""
    return [json.dumps(s).encode() for s in inputs.spend]


def conservation_problems(inputs: Inputs, got: dict[tuple[Any, ...], tuple[Any, ...]],
                          compute_cost: str) -> list[str]:
    """What does not tie out in final roi rows: per model and day, ROI revenue over the
    channels = the credited revenue; per model, compute allocated + unallocated = the GPU
    bill (calls, and idle when fully loaded)."""
    problems = []
    credited: dict[tuple[str, str], float] = {}
    for credit in inputs.credits:
        key = (credit[0], day_of(credit[3]))
        credited[key] = credited.get(key, 0.0) + credit[9]
    reported: dict[tuple[str, str], float] = {}
    revenue = rows.ROI_DAILY.names.index("revenue")
    for key, row in got.items():
        if key[0] == "roi" and key[3] == "channel":
            reported[key[1:3]] = reported.get(key[1:3], 0.0) + row[revenue]
    for key in sorted(credited.keys() | reported.keys()):
        if not math.isclose(reported.get(key, 0.0), credited.get(key, 0.0), rel_tol=1e-9):
            problems.append(f"revenue {key}: reported {reported.get(key)}, credited "
                            f"{credited.get(key)}")
    bill = sum(c["cost_usd"] for c in inputs.costs
               if c["kind"] == "call" or compute_cost == "fully_loaded")
    compute = rows.ROI_DAILY.names.index("compute_cost")
    amount = rows.ROI_UNALLOCATED.names.index("amount")
    for model in MODELS:
        allocated = sum(row[compute] for key, row in got.items()
                        if key[:2] == ("roi", model) and key[3] == "campaign")
        left = sum(row[amount] for key, row in got.items()
                   if key[:2] == ("unallocated", model) and key[3] == "compute")
        if not math.isclose(allocated + left, bill, rel_tol=1e-9):
            problems.append(f"compute {model}: {allocated} + {left} != bill {bill}")
    return problems
