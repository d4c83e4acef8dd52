"""A scale model of the attribution job: its Python operators' cost per span, its keyed
state per user, its checkpoint and its restore, by population and user bucket count.

For each population (--users) and bucket count (--buckets), in a process of its own, the
job's operators are driven directly, one parallel instance of each, as the unit tests drive
them (bench/scale_driver.py, the fakes of tests/flink_fakes.py): the source's framing and
grouping (pipelines/codec/frame.py, group_records(config) records per group, not timed: the
JVM's part), the decoder DecodeOtlp, the duplicate check DedupOrders, the journeys
AttributeJourneys per bucket, the data-driven fit FitDataDrivenModels (one key: counts per
path) and its crediting CreditDataDriven per bucket (the converted journeys, credited with
the fit's weights), the watermark moved after each group.
Measured:
  spans/s per core   spans / CPU seconds (time.process_time) of the operators' calls;
                     wall spans/s beside it (the machine may be shared: CPU time is the
                     figure to size with)
  state B/user       the pickled bytes of every operator's keyed state (as the fakes hold
                     it: pickled on write, as Flink's heap backend serialises it) / users,
                     at the end of the input (no final watermark: a live job never sees
                     it) and at its peak (sampled every 1/40 of the input)
  checkpoint         every operator's keyed state and timers serialised (pickle of the
                     state stores), taken before the input's last group: MB and seconds
  RSS B/user         the process's resident memory at the end of the input less before
                     the operators opened, / users: the books in memory and the fakes'
                     state (a TaskManager's heap state and its Python worker together)
  restore            new operators opened over that checkpoint (unpickled) until they have
                     processed the last group (one batch per bucket: each bucket's
                     JourneyBook.restore replays its log); the same group's time in the
                     uninterrupted run beside it
The population: bench/streaming.py's cached sample (plan_events + the OpenTelemetry SDK
through KafkaSpanExporter, seed 11) up to 200,000 users; larger ones are copies of the
200,000, ids renamed (bench/scale_driver.py `population`). A population that would not fit
in this machine's memory (judged from the largest measured run's peak resident memory) is
extrapolated linearly from the two largest measured ones, and labelled so.

    .venv/bin/python bench/scale.py --users 200000,2000000,20000000 --buckets 4,32,256 \\
        --json scale.json [--flink-users 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale_driver import BASE_USERS, STAGES, OperatorJob, population  # noqa: E402
from pipelines.codec.events import SCANNER_BUILT  # noqa: E402
from pipelines.settings.job_config import load_config  # noqa: E402
from pipelines.settings.stepping import group_records  # noqa: E402

SAMPLES = 40  # state-size samples over the input


def _rss() -> int:
    """This process's resident memory now."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fed(job: OperatorJob, values: list) -> tuple[float, float, bytes, int]:
    """One group framed (not timed), then fed: (wall s, CPU s, the group, its newest)."""
    framed, newest = job.framed(values)
    w, c = time.perf_counter(), time.process_time()
    job.feed(framed, newest)
    return time.perf_counter() - w, time.process_time() - c, framed, newest


def one(users: int, buckets: int) -> dict:
    """One population at one bucket count, measured in this process."""
    from bench.streaming import cached_messages

    config = load_config().replace("flink", user_buckets=buckets)
    base_users = min(users, BASE_USERS)
    base = cached_messages(base_users, seed=11)
    size = group_records(config)
    copies = users // base_users
    groups = -(-len(base) * copies // size)
    every = max(1, groups // SAMPLES)
    rss_before = _rss()
    job = OperatorJob(config)
    wall = cpu = 0.0
    peak: dict[str, int] = {}
    group: list = []
    done = 0
    for message in population(users, base, base_users):
        group.append(message)
        if len(group) < size:
            continue
        if done == groups - 1:  # keep the last group for after the checkpoint
            break
        w, c, _, _ = _fed(job, group)
        wall, cpu, done, group = wall + w, cpu + c, done + 1, []
        if done % every == 0:
            sizes = job.state_bytes()
            if sum(sizes.values()) > sum(peak.values()):
                peak = sizes
    # the checkpoint, before the last group
    w, c = time.perf_counter(), time.process_time()
    checkpoint = job.checkpoint()
    ckpt = {"bytes": len(checkpoint), "s": time.perf_counter() - w,
            "cpu_s": time.process_time() - c}
    before = dict(job.outputs)
    w, c, last_framed, last_newest = _fed(job, group)
    wall, cpu = wall + w, cpu + c
    last = {"s": w, "cpu_s": c}
    credits_last = job.outputs["credits"] - before["credits"]
    end = job.state_bytes()
    rss_end = _rss()
    if sum(end.values()) > sum(peak.values()):
        peak = end
    spans = job.spans
    stages = dict(job.cpu)
    outputs = dict(job.outputs)
    del job
    # the restore: new operators over the checkpoint, until the last group is processed
    w, c = time.perf_counter(), time.process_time()
    restored = OperatorJob.restored(config, checkpoint)
    opened = time.perf_counter() - w
    restored.feed(last_framed, last_newest)
    restore = {"s": time.perf_counter() - w, "cpu_s": time.process_time() - c,
               "unpickle_open_s": opened,
               "same_credits": restored.outputs["credits"] == credits_last}
    return {"users": users, "buckets": buckets, "copies": copies, "spans": spans,
            "messages": len(base) * copies, "groups": groups, "wall_s": wall, "cpu_s": cpu,
            "stages_cpu_s": stages, "outputs": outputs,
            "state_end": end, "state_peak": peak, "checkpoint": ckpt,
            "last_group": last, "restore": restore,
            "rss_operators_bytes": rss_end - rss_before,
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "base_messages_bytes": sum(len(v) for v, _ in base)}


def derived(run: dict) -> dict:
    users, spans = run["users"], run["spans"]
    return {"spans_per_s_per_core": spans / run["cpu_s"],
            "cpu_us_per_span": run["cpu_s"] / spans * 1e6,
            "wall_spans_per_s": spans / run["wall_s"],
            "state_bytes_per_user_end": sum(run["state_end"].values()) / users,
            "state_bytes_per_user_peak": sum(run["state_peak"].values()) / users,
            "checkpoint_mb": run["checkpoint"]["bytes"] / 1e6,
            "checkpoint_s": run["checkpoint"]["s"],
            "rss_bytes_per_user": run["rss_operators_bytes"] / users,
            "restore_s": run["restore"]["s"]}


def extrapolated(users: int, buckets: int, runs: list[dict]) -> dict:
    """Totals (state, checkpoint bytes and seconds, restore seconds) on the line through
    the two largest measured populations at this bucket count; costs per span those of the
    largest (held flat)."""
    known = sorted((r for r in runs if r["buckets"] == buckets and r["measured"]),
                   key=lambda r: r["users"])[-2:]
    if len(known) < 2:
        return {"users": users, "buckets": buckets, "measured": False, "figures": None}
    (a, fa), (b, fb) = [(r["users"], r["figures"]) for r in known]

    def line(key: str, per_user: bool = False) -> float:
        ya = fa[key] * (a if per_user else 1)
        yb = fb[key] * (b if per_user else 1)
        y = yb + (ya - yb) * (users - b) / (a - b)
        return y / users if per_user else y

    figures = {key: fb[key] for key in ("spans_per_s_per_core", "cpu_us_per_span",
                                        "wall_spans_per_s")}
    figures.update({key: line(key, per_user=True) for key in (
        "state_bytes_per_user_end", "state_bytes_per_user_peak", "rss_bytes_per_user")})
    figures.update({key: line(key) for key in ("checkpoint_mb", "checkpoint_s",
                                               "restore_s")})
    return {"users": users, "buckets": buckets, "measured": False, "figures": figures,
            "extrapolated_from": [a, b]}


def flink_job(users: int, buckets: str) -> dict:
    """bench/streaming.py --buckets: the whole job on Kafka + Flink; its table's rows."""
    command = [sys.executable, str(ROOT / "bench" / "streaming.py"), "--users", str(users),
               "--buckets", buckets, "--publish", "unkeyed"]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    print(result.stdout[-6000:], result.stderr[-2000:] if result.returncode else "",
          flush=True)
    rows = []  # from each run's line (its table glues the state to the credits)
    for found in re.finditer(r"(\S+) (\d+x\d+)/(\d+)b \S+ \S+: (?:([\d,]+) spans/s on the "
                             r"data|not measured).*?state (\d+) MB", result.stdout):
        rows.append({"engine": found[1], "shape": found[2], "buckets": int(found[3]),
                     "spans_per_s": float(found[4].replace(",", "")) if found[4] else None,
                     "state_mb": float(found[5])})
    return {"users": users, "returncode": result.returncode, "rows": rows,
            "seconds": time.monotonic() - started, "command": " ".join(command[1:])}


def table(runs: list[dict]) -> None:
    print(f"{'users':>12}{'buckets':>8}{'spans':>13}{'spans/s/core':>13}{'CPU µs/span':>12}"
          f"{'wall sp/s':>10}{'B/user end':>11}{'B/user peak':>12}{'ckpt MB':>9}"
          f"{'ckpt s':>8}{'restore s':>10}{'RSS B/user':>11}  ")
    for run in runs:
        f = run["figures"]
        if f is None:
            print(f"{run['users']:>12,}{run['buckets']:>8}  not measured, not extrapolated "
                  "(fewer than two measured populations)")
            continue
        spans = f"{run['spans']:,}" if run["measured"] else "-"
        note = "" if run["measured"] else \
            "EXTRAPOLATED from {:,} and {:,}".format(*run["extrapolated_from"])
        print(f"{run['users']:>12,}{run['buckets']:>8}{spans:>13}"
              f"{f['spans_per_s_per_core']:>13,.0f}{f['cpu_us_per_span']:>12.2f}"
              f"{f['wall_spans_per_s']:>10,.0f}{f['state_bytes_per_user_end']:>11,.0f}"
              f"{f['state_bytes_per_user_peak']:>12,.0f}{f['checkpoint_mb']:>9,.1f}"
              f"{f['checkpoint_s']:>8.2f}{f['restore_s']:>10.2f}"
              f"{f['rss_bytes_per_user']:>11,.0f}  {note}")


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="200000,2000000,20000000")
    parser.add_argument("--buckets", default="4,32,256")
    parser.add_argument("--json", default="", help="write the results here too")
    parser.add_argument("--memory-fraction", type=float, default=0.7,
                        help="run a population only if its projected peak resident memory "
                             "is below this share of the memory available now")
    parser.add_argument("--flink-users", type=int, default=0,
                        help="also run bench/streaming.py --users N --buckets ... (the whole "
                             "job on Kafka + Flink); 0: not")
    parser.add_argument("--one", nargs=2, type=int, metavar=("USERS", "BUCKETS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return 0
    machine = {"cores": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__, "platform": platform.platform(),
               "memory_available_gb": available_bytes() / 2**30,
               "load_average": os.getloadavg(), "c_scanner": SCANNER_BUILT}
    print(f"machine: {machine['cores']} cores, Python {machine['python']}, numpy "
          f"{machine['numpy']}, {machine['platform']}, {machine['memory_available_gb']:.1f} "
          f"GB available, load {machine['load_average'][0]:.1f}, C scanner "
          f"{'built' if SCANNER_BUILT else 'NOT built'}", flush=True)
    started = time.monotonic()
    runs: list[dict] = []
    for users in (int(n) for n in args.users.split(",")):
        for buckets in (int(n) for n in args.buckets.split(",")):
            measured = [r for r in runs if r["measured"]]
            largest = max(measured, key=lambda r: r["users"], default=None)
            if largest is not None and users > largest["users"]:
                projected = largest["max_rss_bytes"] * users / largest["users"]
                if projected > args.memory_fraction * available_bytes():
                    print(f"{users:,} users, {buckets} buckets: not run: the {largest['users']:,}"
                          f"-user run peaked at {largest['max_rss_bytes'] / 2**30:.1f} GB "
                          f"resident, ×{users / largest['users']:g} = "
                          f"{projected / 2**30:.0f} GB, more than "
                          f"{args.memory_fraction:.0%} of the "
                          f"{available_bytes() / 2**30:.0f} GB available", flush=True)
                    runs.append(extrapolated(users, buckets, runs))
                    continue
            print(f"{users:,} users, {buckets} buckets ...", flush=True)
            child = subprocess.run([sys.executable, __file__, "--one", str(users),
                                    str(buckets)], capture_output=True, text=True)
            if child.returncode:  # said, and left out of the table
                print(f"  NOT MEASURED: the run failed:\n{child.stderr[-3000:]}", flush=True)
                continue
            run = json.loads(child.stdout.strip().splitlines()[-1])
            run["measured"] = True
            run["figures"] = derived(run)
            runs.append(run)
            stages = ", ".join(f"{s} {run['stages_cpu_s'][s]:.1f}" for s in STAGES)
            print(f"  {run['spans']:,} spans, {run['cpu_s']:.1f} CPU s "
                  f"({stages}), "
                  f"wall {run['wall_s']:.1f} s, peak RSS "
                  f"{run['max_rss_bytes'] / 2**30:.2f} GB, restore gave the same credits: "
                  f"{run['restore']['same_credits']}, last group {run['last_group']['s']:.2f} "
                  "s uninterrupted", flush=True)
            save(args.json, machine, runs, None, started)  # kept as it goes
    flink = flink_job(args.flink_users, args.buckets) if args.flink_users else None
    print(f"machine: {machine['cores']} cores, Python {machine['python']}, numpy "
          f"{machine['numpy']}; total {time.monotonic() - started:.0f} s")
    table(runs)
    if flink:
        for row in flink["rows"]:
            print(f"whole Flink job ({flink['users']:,} users, bench/streaming.py): "
                  f"{row['shape']}/{row['buckets']}b: {row['spans_per_s'] or 0:,.0f} spans/s "
                  "on the data, "
                  f"largest checkpoint {row['state_mb']:.0f} MB")
    save(args.json, machine, runs, flink, started)
    return 0


def save(path: str, machine: dict, runs: list[dict], flink: dict | None,
         started: float) -> None:
    if path:
        Path(path).write_text(json.dumps({"machine": machine, "runs": runs,
                                          "flink_job": flink,
                                          "seconds": time.monotonic() - started}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
