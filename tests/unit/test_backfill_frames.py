"""The backfill's engine-free computation: equal to the stream's batch reference, independent
of batch boundaries, with the stream's order-history expiry, bounds and cost links."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import pytest

from pipelines.backfill.archive import tables_by_date, write_tables
from pipelines.backfill.credits import fit_weights, path_counts
from pipelines.backfill.frames import (
    EVENT_COLUMNS,
    SORT_KEY,
    BackfillWindow,
    closed_journeys,
    journeys_of_batches,
)
from pipelines.backfill.local import compute_events, compute_from_archive, read_archive_events
from pipelines.backfill.roi import link_costs, roi_rows
from pipelines.settings.job_config import load_config
from pipelines.sources.expected import valid_events
from pipelines.sources.generator import plan_events
from schemas.records import Conversion, Touchpoint
from tests.reference import TEST_HORIZON_MS, archive_plan, reference_credits
from udfs.journeys.arrival import NO_ARRIVAL
from udfs.periods import DAY_MS

NO_COSTS = pd.DataFrame({"trace_id": pd.Series(dtype=object), "ts_ms": pd.Series(dtype="int64"),
                         "cost": pd.Series(dtype=float)})


def all_days(start: date, count: int) -> tuple[str, ...]:
    return tuple((start + timedelta(days=i)).isoformat() for i in range(count))


def test_single_process_credits_equal_the_streams_batch_reference(tmp_path):
    plan = plan_events(300, seed=21)
    archive_plan(plan, tmp_path)
    config = load_config().replace("attribution", refit_every_s=86_400.0)
    settings = config.computation
    window = BackfillWindow(all_days(date(2026, 10, 1), 46), settings)
    computed = compute_from_archive(tmp_path, window, settings, NO_COSTS, progress=print)
    got = pd.concat([computed.credits_of(day) for day in window.days])
    expected = {(c.model, c.order_id, c.touch_index): c
                for c in reference_credits(plan, config.attribution.models, 86_400.0)}
    assert len(got) == len(expected)
    for row in got.itertuples():
        want = expected[row.model, row.order_id, row.touch_index]
        assert (row.channel, row.campaign, row.stage, row.user_id, row.touch_ts_ms) == \
            (want.channel, want.campaign, want.stage, want.user_id, want.touch_ts_ms)
        assert math.isclose(row.revenue, want.revenue, rel_tol=1e-9)
        assert math.isclose(row.credit, want.credit, rel_tol=1e-9)


@pytest.mark.parametrize("models", [
    None,  # every model: the data-driven ones read the whole archive
    ("first_click", "linear", "time_decay"),  # reads only the lookback before the range
])
def test_a_sub_range_gives_the_same_rows_as_the_whole(tmp_path, models):
    plan = plan_events(200, seed=4)
    archive_plan(plan, tmp_path)
    config = load_config().replace("attribution", refit_every_s=6 * 3600.0)
    if models:
        config = config.replace("attribution", models=models)
    settings = config.computation
    days = all_days(date(2026, 10, 1), 46)
    whole = compute_from_archive(tmp_path, BackfillWindow(days, settings), settings, NO_COSTS,
                                 progress=print)
    part = compute_from_archive(tmp_path, BackfillWindow(days[20:23], settings), settings,
                                NO_COSTS, progress=print)
    before_first_day = 0
    for day in days[20:23]:
        a = whole.credits_of(day).sort_values(["model", "order_id", "touch_index"])
        b = part.credits_of(day).sort_values(["model", "order_id", "touch_index"])
        assert len(a) > 0
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
        before_first_day += int((b.touch_ts_ms < D1 + DAY_MS).sum())  # D1 + 1 = days[20]
    assert before_first_day > 0, "journeys that start before the range keep their lookback"


def test_journeys_do_not_depend_on_batch_boundaries(tmp_path):
    archive_plan(plan_events(60, seed=3), tmp_path)
    settings = load_config().computation
    window = BackfillWindow(all_days(date(2026, 10, 5), 30), settings)
    events = read_archive_events(tmp_path, window)
    whole = closed_journeys(events, settings, window)
    cut = pd.concat(journeys_of_batches((events.iloc[i:i + 7] for i in range(0, len(events), 7)),
                                        settings, window), ignore_index=True)
    assert len(whole) > 30
    pd.testing.assert_frame_equal(whole, cut)


def events(*rows: tuple[str, int, str, str] | tuple[str, int, str, str, int]) -> pd.DataFrame:
    """(user, ts_ms, 'touch'|'order', channel or order id[, arrival ms]) -> sorted
    EVENT_COLUMNS rows (arrival unknown where not given)."""
    frame = pd.DataFrame([{
        "user_id": user, "ts_ms": ts, "is_conversion": kind == "order",
        "channel": name if kind == "touch" else "", "campaign": "",
        "order_id": name if kind == "order" else "", "revenue": 10.0 if kind == "order" else 0.0,
        "currency": "USD" if kind == "order" else "", "trace_id": "",
        "arrival_ms": arrival[0] if arrival else NO_ARRIVAL}
        for user, ts, kind, name, *arrival in rows], columns=list(EVENT_COLUMNS))
    return frame.astype({"ts_ms": "int64", "is_conversion": bool, "revenue": float,
                         "arrival_ms": "int64"}).sort_values(SORT_KEY, ignore_index=True)


D1 = int(datetime(2026, 10, 20, tzinfo=UTC).timestamp() * 1000)


def test_an_order_history_older_than_history_days_is_forgotten_as_in_the_stream():
    config = load_config().replace("journey", winback_days=90.0, history_days=100.0) \
        .replace("attribution", models=("last_click",))
    settings = config.computation
    window = BackfillWindow(("2026-10-20",), settings)
    history = settings.journey.history_ms
    journeys = closed_journeys(events(
        # the stream drops the last order at its timer, last order + history + 1 ms
        ("a", D1 - history - 1, "order", "a0"), ("a", D1, "order", "a1"),
        ("b", D1 - history - 2, "order", "b0"), ("b", D1, "order", "b1"),
        ("c", D1 - 95 * DAY_MS, "order", "c0"), ("c", D1, "order", "c1"),
        ("d", D1 - DAY_MS, "order", "d0"), ("d", D1 + 1, "order", "d1"),
    ), settings, window)
    stages = dict(zip(journeys.order_id, journeys.stage, strict=True))
    assert {o: stages[o] for o in ("a1", "b1", "c1", "d1")} == {
        "a1": "winback", "b1": "new", "c1": "winback", "d1": "repeat"}


def test_the_window_reads_only_what_its_days_need():
    config = load_config().replace("attribution", models=("last_click", "linear"))
    settings = config.computation
    window = BackfillWindow(("2026-10-20", "2026-10-21"), settings)
    link, lookback = settings.link_window_ms, settings.journey.lookback_ms
    assert window.end_ms == D1 + 2 * DAY_MS - 1
    assert window.touches_from_ms == D1 - link - lookback - DAY_MS
    assert window.conversions_from_ms == D1 - settings.journey.history_ms - DAY_MS
    assert window.events_until_ms == window.end_ms + link
    # the data-driven models learn from every journey since the stream began
    everything = BackfillWindow(window.days, load_config().computation)
    assert everything.touches_from_ms is None and everything.conversions_from_ms is None


def test_gpu_cost_goes_to_the_claiming_conversion_within_the_link_window():
    settings = load_config().computation
    window = settings.link_window_ms
    claims = pd.DataFrame({"trace_id": ["t1", "t2", "t2"], "order_id": ["o1", "o2", "o0"],
                           "conversion_ts_ms": [D1 + 10, D1 + 20, D1 - 5 * DAY_MS]})
    costs = pd.DataFrame({
        "trace_id": ["t1", "t1", "t2", "", "t9"],
        "ts_ms": [D1 - window + 11, D1 + window + 10, D1 + 20, D1 + 5, D1 + 7],
        "cost": [1.0, 2.0, 4.0, 8.0, 16.0]})
    compute, unlinked = link_costs(costs, claims, settings, ["2026-10-20", "2026-10-15"])
    # t2 has two claims: the earliest conversion (o0, five days before) takes it
    assert sorted(map(tuple, compute.to_numpy())) == [("2026-10-15", "o0", 4.0),
                                                      ("2026-10-20", "o1", 1.0)]
    # t1's second cost lies a whole window after its claim: unlinked, on a day not asked for
    assert sorted(map(tuple, unlinked.to_numpy())) == [("2026-10-20", 8.0, ""),
                                                       ("2026-10-20", 16.0, "")]


def test_a_day_without_input_has_no_roi_rows_and_spend_alone_is_unallocated():
    settings = (load_config().replace(
        "attribution", models=("last_click", "linear"))).computation
    no_credits = compute_events(events(), BackfillWindow(("2026-10-20",), settings), settings,
                                NO_COSTS, progress=print).credits_of("2026-10-20")
    spend = pd.DataFrame({"platform": ["meta"], "account": ["1"], "campaign": ["c"],
                          "day": ["2026-10-20"], "amount": [5.0]})
    none = spend.iloc[:0]
    compute = pd.DataFrame({"day": [], "order_id": [], "cost": []})
    assert roi_rows("2026-10-20", no_credits, none, compute, 0.0, settings) == (
        [], [], [], None)
    roi, unallocated, *_ = roi_rows("2026-10-20", no_credits, spend, compute, 0.0, settings)
    assert roi == []
    assert unallocated == [("last_click", "2026-10-20", "ad_spend", "c", 5.0, "USD"),
                           ("linear", "2026-10-20", "ad_spend", "c", 5.0, "USD")]


@pytest.mark.parametrize("models", [("last_click",), ("markov", "shapley")])
def test_a_conversion_without_touches_goes_to_unattributed(models):
    settings = (load_config().replace("attribution", models=models)).computation
    window = BackfillWindow(("2026-10-20",), settings)
    computed = compute_events(events(("u", D1 + 5, "order", "o1")), window, settings,
                              NO_COSTS, progress=print)
    credits = computed.credits_of("2026-10-20")
    assert sorted(credits.model) == sorted(models)
    assert set(credits.channel) == {"(unattributed)"} and set(credits.credit) == {1.0}


def test_fits_of_a_later_group_of_periods_start_from_the_same_cumulative_counts(tmp_path):
    archive_plan(plan_events(150, seed=8), tmp_path)
    settings = (
        load_config().replace("attribution", refit_every_s=12 * 3600.0)).computation
    window = BackfillWindow(all_days(date(2026, 10, 1), 46), settings)
    journeys = closed_journeys(read_archive_events(tmp_path, window), settings, window)
    counts = path_counts(journeys)
    needed = journeys[journeys.in_days][["period_end_ms", "path"]].drop_duplicates()
    periods = sorted(needed.period_end_ms.unique())
    assert len(periods) > 20
    whole = fit_weights(counts, needed, settings)
    halves = pd.concat([fit_weights(counts, needed[needed.period_end_ms < periods[20]],
                                    settings),
                        fit_weights(counts, needed[needed.period_end_ms >= periods[20]],
                                    settings)], ignore_index=True)
    pd.testing.assert_frame_equal(whole, halves)  # exactly: counts are whole numbers


def test_frames_of_no_rows_keep_types_arrow_can_convert():
    import pyarrow as pa

    settings = load_config().computation
    empty = closed_journeys(events(), settings, BackfillWindow(("2026-10-20",), settings))
    assert len(empty) == 0
    pa.Array.from_pandas(empty.trace_ids, type=pa.list_(pa.string()))
    pa.Array.from_pandas(empty.touch_ts, type=pa.list_(pa.int64()))
    pa.Array.from_pandas(empty.order_id, type=pa.string())


def test_events_that_reached_kafka_more_than_the_horizon_late_do_not_count():
    config = load_config().replace("journey", correction_days=2.0) \
        .replace("attribution", models=("linear",))
    horizon = config.computation.journey.correction_ms
    rows = (
        ("a", D1 - 3 * DAY_MS, "touch", "email", D1 - 3 * DAY_MS + horizon),  # at the horizon
        ("a", D1 - 2 * DAY_MS, "touch", "display", D1 - 2 * DAY_MS + horizon + 1),  # 1 ms past
        ("a", D1 - DAY_MS, "touch", "search", NO_ARRIVAL),  # unknown: nothing says it was late
        ("a", D1, "order", "a1", D1 + 60_000),
        ("b", D1 - DAY_MS, "touch", "email", D1),
        ("b", D1 + 5, "order", "b1", D1 + 5 + horizon + 1),  # the order itself came late
        ("c", D1 - DAY_MS, "touch", "affiliate", 0),  # 0 or less: unknown too
        ("c", D1 + 7, "order", "c1", D1 + 7 + horizon))

    def paths(config):
        settings = config.computation
        journeys = closed_journeys(events(*rows), settings,
                                   BackfillWindow(("2026-10-20",), settings))
        converted = journeys[journeys.converted]
        return dict(zip(converted.order_id, converted.touch_channel, strict=True))

    assert paths(config) == {"a1": ["email", "search"], "c1": ["affiliate"]}
    # horizon 0: corrections off, arrival decides nothing (the watermark alone does)
    assert paths(config.replace("journey", correction_days=0.0)) == {
        "a1": ["email", "display", "search"], "b1": ["email"], "c1": ["affiliate"]}


def test_the_backfill_leaves_out_exactly_the_archived_events_that_arrived_late(tmp_path):
    """An archive with record timestamps gives the rows of an archive without the events
    that came more than the horizon late; with horizon 0 those of the whole archive."""
    config = load_config().replace("journey", correction_days=2.0).replace(
        "attribution", models=("last_click", "linear", "shapley"), refit_every_s=86_400.0)
    horizon = config.computation.journey.correction_ms
    records, arrivals = [], []
    for i, e in enumerate(valid_events(plan_events(150, seed=6, late_fraction=0.0),
                                       TEST_HORIZON_MS)):
        ms = e.ts_ns // 10**6
        records.append(Touchpoint(e.user_id, ms, e.channel, e.campaign, f"t{i}", "")
                       if e.kind == "touchpoint" else
                       Conversion(e.user_id, ms, e.order_id, e.revenue, e.currency, f"c{i}", ""))
        arrivals.append(ms + (horizon + 3_600_000 if i % 9 == 4 else 60_000))
    late = [i % 9 == 4 for i in range(len(records))]
    write_tables(tmp_path / "stamped", tables_by_date(records, arrivals), "all")
    write_tables(tmp_path / "in_time", tables_by_date(
        [r for r, gone in zip(records, late, strict=True) if not gone]), "kept")
    write_tables(tmp_path / "unstamped", tables_by_date(records), "all")

    def rows(archive, config):
        settings = config.computation
        window = BackfillWindow(all_days(date(2026, 10, 10), 20), settings)
        computed = compute_from_archive(tmp_path / archive, window, settings, NO_COSTS,
                                        progress=print)
        return pd.concat([computed.credits_of(day) for day in window.days]) \
            .sort_values(["model", "order_id", "touch_index"], ignore_index=True)

    stamped = rows("stamped", config)
    assert len(stamped) > 100
    pd.testing.assert_frame_equal(stamped, rows("in_time", config))
    assert not stamped.equals(rows("unstamped", config))  # the late events mattered
    off = config.replace("journey", correction_days=0.0)
    pd.testing.assert_frame_equal(rows("stamped", off), rows("unstamped", off))
