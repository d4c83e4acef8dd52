"""The Spark backfill on N events beside the same computation in one pandas process.

Writes a raw archive of synthetic telemetry (by default 10 million events over 45 days,
the generator's personas: converters, repeat buyers, window-shoppers; spend per campaign
and day and GPU costs on a third of the touches' traces in the warehouse), then backfills
every day of it twice into fresh SQLite warehouses: `seedance backfill` with the Spark
engine (local[*], the shipped settings) and with the pandas engine (one process, the same
pipelines.backfill.frames / .credits / udfs functions). Each run is a child process; its peak
resident memory is the sum over its whole process tree (driver, JVM, Python workers),
sampled every 0.2 s. Prints events/s, phase times and peak RSS side by side, the ratio,
and checks that both warehouses hold the same totals.

    .venv/bin/python bench/backfill.py                       # 10M events
    .venv/bin/python bench/backfill.py --events 1000000 --refit-hours 24
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipelines.backfill.archive import SCHEMAS, write_tables  # noqa: E402
from pipelines.sources.generator import CHANNEL_WEIGHTS, CHANNELS  # noqa: E402
from schemas.rows import AD_SPEND, GPU_CALL_COST  # noqa: E402
from udfs.periods import DAY_MS, day_of  # noqa: E402

START_MS = 1_790_812_800_000  # 2026-10-01 UTC
EVENTS_PER_USER = 4.22  # what the personas below produce inside the window (measured)


def synthetic_users(rng: np.random.Generator, first: int, users: int, days: int
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Touches and orders of `users` users, vectorised, with plan_events' personas: 60 %
    convert (15 % of them twice), 5 % of those buy without a touch, the rest window-shop;
    1-6 touches per cycle, 1.5 days apart on average, the order up to 6 h after."""
    span = days * DAY_MS
    persona = rng.random(users)
    cycles = np.where(persona < 0.15, 2, 1)
    converts = persona < 0.6
    user_of_cycle = np.repeat(np.arange(users), cycles)
    n_cycles = len(user_of_cycle)
    direct = converts[user_of_cycle] & (rng.random(n_cycles) < 0.05)
    touches = np.where(direct, 0, rng.integers(1, 7, n_cycles))
    cycle_of_touch = np.repeat(np.arange(n_cycles), touches)
    # each cycle starts where the previous one of its user ended plus 5-40 days
    gaps = rng.exponential(1.5 * DAY_MS, len(cycle_of_touch))
    cycle_first = np.r_[0, np.cumsum(touches)[:-1]]
    within = np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[cycle_first] - gaps[cycle_first],
                                         touches) if len(gaps) else gaps
    cycle_length = np.zeros(n_cycles)
    np.maximum.at(cycle_length, cycle_of_touch, within)
    pause = (5 + 35 * rng.random(n_cycles)) * DAY_MS
    user_start = rng.random(users) * span * 0.8
    second = np.r_[False, user_of_cycle[1:] == user_of_cycle[:-1]]
    offset = np.where(second, np.r_[0, cycle_length[:-1] + pause[:-1]], 0)
    cycle_start = user_start[user_of_cycle] + offset
    touch_ts = START_MS + (cycle_start[cycle_of_touch] + within).astype(np.int64)
    channel_names = np.array(list(CHANNELS), dtype=object)
    channel = rng.choice(len(CHANNELS), len(touch_ts), p=np.array(CHANNEL_WEIGHTS)
                         / sum(CHANNEL_WEIGHTS))
    campaign_pick = rng.integers(0, 2, len(touch_ts))
    campaigns = np.array([CHANNELS[c][min(i, len(CHANNELS[c]) - 1)]
                          for c, i in zip(channel_names[channel], campaign_pick, strict=True)],
                         dtype=object)
    order_cycles = np.flatnonzero(converts[user_of_cycle])
    order_ts = START_MS + (cycle_start[order_cycles] + cycle_length[order_cycles]
                           + rng.random(len(order_cycles)) * 6 * 3_600_000).astype(np.int64)
    user_names = np.array([f"user-{first + u:08d}" for u in range(users)], dtype=object)
    end = START_MS + span
    t_keep, o_keep = touch_ts < end, order_ts < end
    touch = {"user_id": user_names[user_of_cycle[cycle_of_touch]][t_keep],
             "ts_ms": touch_ts[t_keep], "channel": channel_names[channel][t_keep],
             "campaign": campaigns[t_keep]}
    order = {"user_id": user_names[user_of_cycle[order_cycles]][o_keep],
             "ts_ms": order_ts[o_keep],
             "order_id": np.array([f"order-{first:08d}-{i:07d}" for i in range(o_keep.sum())],
                                  dtype=object),
             "revenue": np.round(rng.lognormal(4.0, 0.6, o_keep.sum()), 2)}
    return touch, order


def hex_ids(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    return np.array([f"{x:0{width}x}" for x in rng.integers(0, 2**62, n)], dtype=object)


def write_archive(root: Path, warehouse: Path, events: int, days: int, seed: int) -> int:
    """The synthetic archive in chunks of users, and the warehouse's cost inputs."""
    from pipelines.store.warehouse import Warehouse

    rng = np.random.default_rng(seed)
    users = int(events / EVENTS_PER_USER)
    chunk = 200_000
    total = 0
    spend: dict[tuple[str, str], int] = {}
    costs: list[tuple[object, ...]] = []
    for first in range(0, users, chunk):
        touch, order = synthetic_users(rng, first, min(chunk, users - first), days)
        touch["trace_id"] = hex_ids(rng, len(touch["ts_ms"]), 32)
        touch["span_id"] = hex_ids(rng, len(touch["ts_ms"]), 16)
        order["currency"] = np.full(len(order["ts_ms"]), "USD", dtype=object)
        order["trace_id"] = hex_ids(rng, len(order["ts_ms"]), 32)
        order["span_id"] = hex_ids(rng, len(order["ts_ms"]), 16)
        total += len(touch["ts_ms"]) + len(order["ts_ms"])
        tables = {}
        for kind, columns in (("touchpoints", touch), ("conversions", order)):
            day = columns["ts_ms"] // DAY_MS
            for number in np.unique(day):
                rows = day == number
                tables[kind, day_of(int(number) * DAY_MS)] = pa.table(
                    {name: columns[name][rows] for name in SCHEMAS[kind].names},
                    schema=SCHEMAS[kind])
        write_tables(root, tables, f"chunk-{first // chunk:04d}")
        touch_day = touch["ts_ms"] // DAY_MS
        for campaign, number in zip(touch["campaign"], touch_day, strict=True):
            if campaign:
                key = (campaign, day_of(int(number) * DAY_MS))
                spend[key] = spend.get(key, 0) + 1
        gpu = rng.random(len(touch["ts_ms"])) < 0.3
        costs.extend(("GPU-1", int(ts) + 42, trace, f"{i:016x}", int(ts), "L40S", "ranker",
                      "", "", "", 0.04, float(cost), float(cost), True)
                     for i, (ts, trace, cost) in enumerate(zip(
                         touch["ts_ms"][gpu], touch["trace_id"][gpu],
                         np.round(rng.uniform(0.001, 0.02, gpu.sum()), 5), strict=True)))
        print(f"  archive: {total:,} events written", flush=True)
    with Warehouse(f"sqlite:///{warehouse}") as wh:
        wh.insert(AD_SPEND, [("ads", "1", campaign, day, round(count * 2.5, 2), "USD")
                             for (campaign, day), count in spend.items()])
        wh.insert(GPU_CALL_COST, costs)
    print(f"  warehouse inputs: {len(spend):,} spend rows, {len(costs):,} GPU call costs")
    return total


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo.extend(children.get(current, []))
    return total


def run_engine(engine: str, archive: Path, warehouse: Path, days: int, refit_s: float,
               work: Path) -> dict[str, object]:
    """One `seedance backfill` in a child process; its wall time, phases and peak RSS."""
    config = work / f"{engine}.yaml"
    streaming = work / "streaming.yaml"
    streaming.write_text(json.dumps({"attribution": {"refit_every_s": refit_s},
                                     "warehouse": {"url": f"sqlite:///{warehouse}"}}))
    config.write_text(json.dumps({"streaming_config": str(streaming), "engine": engine,
                                  "work_dir": str(work / "staging"),
                                  "archive": {"path": str(archive)}}))
    last = day_of(START_MS + (days - 1) * DAY_MS)
    command = [sys.executable, "-m", "jobs.cli", "backfill", "--from", day_of(START_MS),
               "--to", last, "--config", str(config)]
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
    peak = 0
    lines: list[tuple[float, str]] = []
    os.set_blocking(child.stdout.fileno(), False)  # type: ignore[union-attr]
    while child.poll() is None:
        peak = max(peak, tree_rss(child.pid))
        for line in child.stdout:  # type: ignore[union-attr]
            lines.append((time.monotonic() - started, line.rstrip()))
        time.sleep(0.2)
    for line in child.stdout:  # type: ignore[union-attr]
        lines.append((time.monotonic() - started, line.rstrip()))
    wall = time.monotonic() - started
    if child.returncode:
        print("\n".join(text for _, text in lines[-40:]))
        raise SystemExit(f"{engine} backfill failed ({child.returncode})")
    for at, text in lines:
        if not text.startswith("[") or text.startswith("[1/") or " 1/" in text:
            print(f"    {engine:6} {at:7.1f}s  {text[:110]}")
    first_write = next(at for at, text in lines if text.startswith("[1/"))
    return {"wall_s": wall, "compute_s": first_write, "write_s": wall - first_write,
            "peak_rss": peak}


def totals(warehouse: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(warehouse) as db:
        return db.execute(
            "SELECT model, COUNT(*), ROUND(SUM(credit), 6), ROUND(SUM(revenue), 4) FROM "
            "attribution_credits GROUP BY model ORDER BY model").fetchall() + db.execute(
            "SELECT COUNT(*), ROUND(SUM(ad_spend), 4), ROUND(SUM(compute_cost), 4) FROM "
            "roi_daily").fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=45)
    parser.add_argument("--refit-hours", type=float, default=1.0,
                        help="data-driven refit period (the shipped config: 1 h)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--engines", default="spark,pandas")
    parser.add_argument("--work", help="folder to keep (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="seedance-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    archive, inputs = work / "archive", work / "inputs.db"
    print(f"Backfill benchmark: {args.events:,} events over {args.days} days, refit every "
          f"{args.refit_hours:g} h, {os.cpu_count()} cores; work folder {work}")
    started = time.monotonic()
    if not archive.exists():
        from pipelines.store.warehouse import Warehouse

        Warehouse(f"sqlite:///{inputs}").close()
        count = write_archive(archive, inputs, args.events, args.days, args.seed)
        (work / "events.txt").write_text(str(count))
        print(f"  generated in {time.monotonic() - started:.0f}s")
    count = int((work / "events.txt").read_text())
    results = {}
    for engine in args.engines.split(","):
        warehouse = work / f"{engine}.db"
        shutil.copy(inputs, warehouse)
        results[engine] = run_engine(engine, archive, warehouse, args.days,
                                     args.refit_hours * 3600, work)
        results[engine]["totals"] = totals(warehouse)
    print(f"\n{count:,} events, every day backfilled; load average now "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine)")
    print(f"{'engine':8}{'wall s':>9}{'events/s':>12}{'compute s':>11}{'events/s':>12}"
          f"{'writes s':>10}{'peak RSS GB':>13}")
    for engine, r in results.items():
        print(f"{engine:8}{r['wall_s']:9.1f}{count / r['wall_s']:12,.0f}{r['compute_s']:11.1f}"
              f"{count / r['compute_s']:12,.0f}{r['write_s']:10.1f}"
              f"{r['peak_rss'] / 2**30:13.2f}")
    if {"spark", "pandas"} <= results.keys():
        s, p = results["spark"], results["pandas"]
        print(f"ratio spark/pandas: throughput {p['wall_s'] / s['wall_s']:.2f}x end to end, "
              f"{p['compute_s'] / s['compute_s']:.2f}x compute; "
              f"peak memory {s['peak_rss'] / p['peak_rss']:.2f}x")
        same = s["totals"] == p["totals"]
        print("same totals in both warehouses (credits per model, ROI):", same)
        if not same:
            raise SystemExit("the engines disagree")


if __name__ == "__main__":
    main()
