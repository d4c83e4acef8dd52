"""Customers with a known buying process, and their orders written to a warehouse as the
loader writes them: shared by the LTV report's and its command's tests."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from pipelines.codec import credit_messages
from pipelines.store.sinks import CreditsSink, RoiSink, TableSink
from pipelines.store.warehouse import Warehouse
from schemas import rows
from udfs.periods import DAY_MS, day_of, day_start_ms


def simulated(customers: int, seed: int) -> pd.DataFrame:
    """Orders of customers acquired over 200 days by search or social (social's buy more),
    each buying at a gamma-distributed rate until it drops out (beta-distributed)."""
    rng = np.random.default_rng(seed)
    orders = []
    for u in range(customers):
        channel = ("search", "social")[u % 2]
        day = int(rng.integers(0, 200))
        rate, dropout = rng.gamma(0.8, 1 / 15) * (1 + u % 2), rng.beta(1.0, 3.0)
        k, t = 0, float(day)
        while t <= 300:
            orders.append((f"o{u}-{k}", f"u{u}", int(t), "new" if k == 0 else "repeat",
                           channel if k == 0 else "email", float(rng.gamma(4.0, 10.0))))
            k, t = k + 1, t + rng.exponential(1 / rate)
            if rng.random() < dropout:
                break
    return pd.DataFrame(orders, columns=["order_id", "user_id", "day", "stage", "channel",
                                         "revenue"])


def load(wh: Warehouse, orders: pd.DataFrame) -> None:
    """The orders as the loader stores them: credits (last_click: the order's channel;
    linear: half to it, half to 'display') through the credits topic's sink, each order's
    cost under both models through the ROI topic's sink, spend through ad_spend's."""
    base = day_start_ms("2026-01-01")
    credits, messages = [], []
    for o in orders.itertuples():
        ts = base + o.day * DAY_MS + 3_600_000
        campaign = {"search": "gs-1", "social": "meta-1"}.get(o.channel, "")
        credits.append(("last_click", o.order_id, o.user_id, ts, 0, o.channel, campaign, ts,
                        1.0, o.revenue, "USD", o.stage))
        for i, channel in enumerate((o.channel, "display")):
            credits.append(("linear", o.order_id, o.user_id, ts, i, channel,
                            campaign if i == 0 else "dv-1", ts, 0.5, o.revenue / 2, "USD",
                            o.stage))
        for model in ("last_click", "linear"):
            messages.append(json.dumps({
                "kind": "order_cost", "model": model, "day": day_of(ts),
                "order_id": o.order_id, "revenue": o.revenue,
                "ad_spend": 12.0 if o.stage == "new" else 1.0, "compute_cost": 0.5,
                "currency": "USD"}).encode())
    CreditsSink(wh).write([credit_messages.encode(credits).encode()])
    RoiSink(wh).write(messages)
    TableSink(wh, rows.AD_SPEND).write([("google_ads", "g", "gs-1", "2026-01-05", 300.0, "USD"),
                                        ("dv360", "d", "dv-1", "2026-01-05", 50.0, "USD")])
