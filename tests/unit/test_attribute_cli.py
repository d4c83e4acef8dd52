"""`seedance attribute` as a user runs it: both input shapes, clear errors, rejects."""

import numpy as np
import pandas as pd
import pytest

from jobs.cli import main

EVENTS = """user_id,timestamp,channel,campaign,event_type,revenue,order_id
u1,2026-09-01T00:00:00Z,email,spring,touch,,
u1,2026-09-02T00:00:00Z,search,brand,touch,,
u1,2026-09-03T00:00:00Z,,,conversion,120,o1
u2,1788220800000,display,aw,touch,,
u2,1788224400000,,,conversion,30,o2
u3,2026-09-05,,,conversion,10,o3
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_events_to_csv_by_channel(tmp_path, capsys):
    src = write(tmp_path, "events.csv", EVENTS)
    out = tmp_path / "out.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out),
                 "--models", "last_click,linear,shapley"]) == 0
    result = pd.read_csv(out)
    assert list(result.columns) == ["model", "channel", "conversions", "revenue"]
    last = result[result.model == "last_click"].set_index("channel")
    assert last.loc["search", ["conversions", "revenue"]].tolist() == [1.0, 120.0]
    assert last.loc["display", ["conversions", "revenue"]].tolist() == [1.0, 30.0]
    assert last.loc["(unattributed)", ["conversions", "revenue"]].tolist() == [1.0, 10.0]
    linear = result[result.model == "linear"].set_index("channel")
    assert linear.loc["email"].revenue == pytest.approx(60.0)
    assert "3 conversions" in capsys.readouterr().out


def test_events_by_campaign_to_parquet(tmp_path):
    src = write(tmp_path, "events.csv", EVENTS)
    out = tmp_path / "out.parquet"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--by", "campaign",
                 "--models", "first_click"]) == 0
    result = pd.read_parquet(out)
    assert set(result.columns) == {"model", "channel", "campaign", "conversions", "revenue"}
    row = result[result.channel == "email"]
    assert (row.campaign.item(), row.revenue.item()) == ("spring", 120.0)


def test_paths_input(tmp_path):
    src = write(tmp_path, "paths.csv", "path,conversions,non_conversions,revenue\n"
                                       "a > b,3,1,30\na > c,1,1,10\n")
    out = tmp_path / "out.csv"
    assert main(["attribute", "--input", str(src), "--format", "paths", "--out", str(out),
                 "--models", "markov"]) == 0
    result = pd.read_csv(out).set_index("channel")
    assert result.conversions.to_dict() == pytest.approx({"a": 3 * 4 / 7 + 0.8,
                                                          "b": 3 * 3 / 7, "c": 0.2})


@pytest.mark.parametrize(("row", "message"), [
    ("u9,2026-09-01,,,conversion,abc,o9", "events.csv:8: field 'revenue' is not a number"),
    ("u9,2026-09-01,,,conversion,-4,o9", "events.csv:8: field 'revenue' is negative: -4"),
    ("u9,yesterday,email,,touch,,", "events.csv:8: field 'timestamp' is not epoch"),
    ("u9,2026-09-01,,,touch,,", "events.csv:8: field 'channel' is missing on a touch"),
    (",2026-09-01,email,,touch,,", "events.csv:8: field 'user_id' is missing"),
    ("u9,2026-09-01,email,,click,,", "events.csv:8: field 'event_type' must be touch or"),
    ("u9,2026-09-01,,,conversion,5,o1", "events.csv:8: field 'order_id' repeats"),
])
def test_invalid_row_names_file_line_and_field(tmp_path, capsys, row, message):
    src = write(tmp_path, "events.csv", EVENTS + row + "\n")
    assert main(["attribute", "--input", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert message in capsys.readouterr().err


def test_skip_invalid_sets_rows_aside_and_continues(tmp_path):
    src = write(tmp_path, "events.csv", EVENTS + "u9,2026-09-01,,,conversion,abc,o9\n")
    out = tmp_path / "o.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--skip-invalid",
                 "--models", "last_click"]) == 0
    rejects = pd.read_csv(tmp_path / "o.rejects.csv")
    assert rejects[["line", "field", "user_id"]].values.tolist() == [[8, "revenue", "u9"]]
    assert pd.read_csv(out).conversions.sum() == 3.0


def test_input_problems_are_reported_plainly(tmp_path, capsys):
    missing_col = write(tmp_path, "p.csv", "path,conversions\na,1\n")
    assert main(["attribute", "--input", str(missing_col), "--format", "paths",
                 "--out", str(tmp_path / "o.csv")]) == 2
    assert "missing column(s) non_conversions" in capsys.readouterr().err
    assert main(["attribute", "--input", str(tmp_path / "nope.csv"),
                 "--out", str(tmp_path / "o.csv")]) == 2
    assert "file not found" in capsys.readouterr().err
    paths = write(tmp_path, "q.csv", "path,conversions,non_conversions\na,1,0\n")
    assert main(["attribute", "--input", str(paths), "--format", "paths",
                 "--models", "time_decay", "--out", str(tmp_path / "o.csv")]) == 2
    assert "time_decay needs touch and conversion times" in capsys.readouterr().err
    assert main(["attribute", "--input", str(paths), "--format", "paths",
                 "--models", "magic", "--out", str(tmp_path / "o.csv")]) == 2
    assert "unknown attribution model(s) magic" in capsys.readouterr().err
    latin = tmp_path / "l.csv"
    latin.write_bytes(b"path,conversions,non_conversions\ncaf\xe9,1,0\n")
    assert main(["attribute", "--input", str(latin), "--format", "paths",
                 "--out", str(tmp_path / "o.csv")]) == 2
    assert "l.csv:2: byte 0xe9 at column 4 is not UTF-8" in capsys.readouterr().err


def test_paths_with_a_broken_row_and_skip_invalid(tmp_path, capsys):
    src = write(tmp_path, "paths.csv", "path,conversions,non_conversions,revenue\n"
                                       "a > b,3,1,30\na >  > c,5,0,50\n,2,0,4\na > b,1,0,10\n")
    out = tmp_path / "out.csv"
    assert main(["attribute", "--input", str(src), "--format", "paths", "--out", str(out),
                 "--models", "last_click"]) == 2
    assert "paths.csv:3: field 'path' has an empty step" in capsys.readouterr().err
    assert main(["attribute", "--input", str(src), "--format", "paths", "--out", str(out),
                 "--models", "last_click", "--skip-invalid"]) == 0
    result = pd.read_csv(out).set_index("channel")
    assert result.conversions.to_dict() == {"b": 4.0, "(unattributed)": 2.0}
    assert result.revenue.to_dict() == {"b": 40.0, "(unattributed)": 4.0}
    assert pd.read_csv(tmp_path / "out.rejects.csv").line.tolist() == [3]


@pytest.mark.parametrize(("text", "message"), [
    # one field too many on a middle row: pandas shifted it (a channel '1' got credit)
    (EVENTS.replace("u2,1788220800000,display,aw,touch,,",
                    "u2,1788220800000,display,aw,touch,,,1"),
     "events.csv:5: 8 fields, the header has 7"),
    # ... on the first data row: pandas took it for an index and blamed a later line
    (EVENTS.replace("u1,2026-09-01T00:00:00Z,email,spring,touch,,",
                    "u1,2026-09-01T00:00:00Z,email,spring,touch,,,x"),
     "events.csv:2: 8 fields, the header has 7"),
    # one too few
    (EVENTS.replace("u2,1788220800000,display,aw,touch,,", "u2,1788220800000,display,aw,touch,"),
     "events.csv:5: 6 fields, the header has 7"),
    # nothing at all: the file is named
    ("", "events.csv: empty file, expected a header line with columns user_id,"),
])
def test_rows_with_a_wrong_field_count_are_refused(tmp_path, capsys, text, message):
    src = write(tmp_path, "events.csv", text)
    assert main(["attribute", "--input", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert message in capsys.readouterr().err


def test_skip_invalid_sets_a_row_with_a_wrong_field_count_aside(tmp_path):
    src = write(tmp_path, "events.csv", EVENTS.replace(
        "u2,1788220800000,display,aw,touch,,", "u2,1788220800000,display,aw,touch,,,1")
        + "u9,2026-09-01,,,conversion,abc,o9\n")
    out = tmp_path / "o.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--skip-invalid",
                 "--models", "last_click"]) == 0
    rejects = pd.read_csv(tmp_path / "o.rejects.csv")
    assert rejects[["line", "field"]].values.tolist() == [[5, "(row)"], [8, "revenue"]]
    assert rejects.reason[0].startswith("has 8 fields, the header has 7")
    result = pd.read_csv(out).set_index("channel")
    assert "1" not in result.index and "display" not in result.index
    assert result.conversions.sum() == 3.0  # u2's conversion: unattributed without its touch


# --- --ci: bootstrap intervals ---------------------------------------------------------------

POINT = ["conversions", "revenue"]
INTERVALS = [f"{m}{s}" for m in ("conversions", "revenue", "share", "revenue_share")
             for s in ("", "_low", "_high", "_se")]


def many_events(orders=300, seed=3):
    """Users with 1-3 touches over four channels, most of them converting once."""
    rng = np.random.default_rng(seed)
    lines = ["user_id,timestamp,channel,campaign,event_type,revenue,order_id"]
    start = 1788220800000
    for u in range(orders):
        ts = start + int(rng.integers(0, 5 * 86_400_000))
        for _ in range(int(rng.integers(1, 4))):
            channel = rng.choice(["email", "search", "display", "social"], p=[.4, .3, .2, .1])
            lines.append(f"u{u},{ts},{channel},c{rng.integers(2)},touch,,")
            ts += int(rng.integers(60_000, 86_400_000))
        if rng.random() < 0.8:
            lines.append(f"u{u},{ts},,,conversion,{rng.gamma(2, 30):.2f},o{u}")
    return "\n".join(lines) + "\n"


def assert_intervals_hold_the_point(result):
    for measure in ("conversions", "revenue", "share", "revenue_share"):
        assert (result[f"{measure}_low"] <= result[measure] + 1e-9).all(), measure
        assert (result[measure] <= result[f"{measure}_high"] + 1e-9).all(), measure
        assert (result[f"{measure}_se"] >= 0).all()
    for model, rows in result.groupby("model"):
        assert rows.share.sum() == pytest.approx(1.0), model


@pytest.mark.parametrize("by", ["channel", "campaign"])
def test_events_with_ci_add_intervals_around_the_same_points(tmp_path, capsys, by):
    src = write(tmp_path, "events.csv", many_events())
    plain, out = tmp_path / "plain.csv", tmp_path / "ci.csv"
    args = ["attribute", "--input", str(src), "--models", "last_click,linear,markov",
            "--by", by]
    assert main([*args, "--out", str(plain)]) == 0
    assert main([*args, "--out", str(out), "--ci", "0.9", "--resamples", "400"]) == 0
    text = capsys.readouterr().out
    assert "intervals at 90 % (seed 0): 400 bootstrap resamples over conversions" in text
    keys = ["model", "channel", *(["campaign"] if by == "campaign" else [])]
    before, result = pd.read_csv(plain), pd.read_csv(out)
    assert list(result.columns) == [*keys, *INTERVALS, "resamples", "level"]
    pd.testing.assert_frame_equal(result[[*keys, *POINT]], before)  # same rows, same order
    assert (result.level == 0.9).all() and (result.resamples == 400).all()
    assert_intervals_hold_the_point(result)
    # a channel with many conversions gets a real interval, not a point
    big = result[(result.model == "last_click")].sort_values("conversions").iloc[-1]
    assert big.conversions_low < big.conversions < big.conversions_high


def test_paths_with_ci_refit_the_data_driven_models(tmp_path, capsys):
    rng = np.random.default_rng(5)
    rows = [f"{a} > {b},{rng.integers(5, 40)},{rng.integers(20, 90)},{rng.integers(100, 900)}"
            for a in "abcd" for b in "abcd"]
    src = write(tmp_path, "paths.csv", "path,conversions,non_conversions,revenue\n"
                + "\n".join(rows) + "\n")
    plain, out = tmp_path / "plain.csv", tmp_path / "ci.csv"
    args = ["attribute", "--input", str(src), "--format", "paths",
            "--models", "linear,shapley"]
    assert main([*args, "--out", str(plain)]) == 0
    assert main([*args, "--out", str(out), "--ci", "0.95", "--resamples", "300"]) == 0
    printed = capsys.readouterr().out
    assert "300 (linear), 200 (shapley) bootstrap resamples over journeys" in printed
    assert "shapley: refitted percentile intervals are a little narrow; at 95 % they held " \
        "the truth 93-94 % of the time" in printed
    result = pd.read_csv(out)
    assert list(result.columns) == ["model", "channel", *INTERVALS, "resamples", "level"]
    pd.testing.assert_frame_equal(result[["model", "channel", *POINT]], pd.read_csv(plain))
    assert result.set_index("model").resamples.to_dict() == {"linear": 300, "shapley": 200}
    assert_intervals_hold_the_point(result)


@pytest.mark.parametrize("fmt", ["events", "paths"])
def test_ci_is_seeded(tmp_path, fmt):
    src = write(tmp_path, "in.csv", many_events(120) if fmt == "events" else
                "path,conversions,non_conversions,revenue\na > b,30,10,300\na > c,10,12,90\n"
                "b,7,30,50\n")
    args = ["attribute", "--input", str(src), "--format", fmt, "--models", "linear,markov",
            "--ci", "0.95", "--resamples", "200"]
    files = [tmp_path / f"{name}.csv" for name in ("one", "two", "other")]
    for path, seed in zip(files, ("7", "7", "8"), strict=True):
        assert main([*args, "--seed", seed, "--out", str(path)]) == 0
    assert files[0].read_bytes() == files[1].read_bytes()
    assert files[0].read_bytes() != files[2].read_bytes()


@pytest.mark.parametrize(("extra", "message"), [
    (["--ci", "1.5"], "--ci is the intervals' level, strictly between 0 and 1"),
    (["--ci", "0"], "--ci is the intervals' level, strictly between 0 and 1"),
    (["--ci", "95"], "got 95"),
    (["--ci", "0.95", "--resamples", "1"], "--resamples must be at least 2"),
    (["--resamples", "100"], "--resamples sets the bootstrap of --ci: give --ci too"),
])
def test_bad_ci_is_a_clear_error(tmp_path, capsys, extra, message):
    src = write(tmp_path, "events.csv", EVENTS)
    out = tmp_path / "o.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_ci_on_a_file_without_conversions(tmp_path):
    src = write(tmp_path, "events.csv", EVENTS.split("u1,2026-09-03")[0])
    out = tmp_path / "o.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--ci", "0.95"]) == 0
    assert list(pd.read_csv(out).columns) == ["model", "channel", *INTERVALS, "resamples",
                                              "level"]


# u1's search touch reached Kafka three days after it happened, u2's order two days after:
# with a horizon of one day (journey.correction_days) neither counts; an empty arrival is
# unknown and counts. Epoch ms (1788220800000 = 2026-09-01) and ISO 8601 mix, as timestamp.
ARRIVALS = """user_id,timestamp,channel,campaign,event_type,revenue,order_id,arrival
u1,2026-09-01T00:00:00Z,email,spring,touch,,,2026-09-01T00:05:00Z
u1,2026-09-02T00:00:00Z,search,brand,touch,,,2026-09-05T00:00:00Z
u1,2026-09-03T00:00:00Z,,,conversion,120,o1,2026-09-04T00:00:00Z
u2,1788220800000,display,aw,touch,,,1788220860000
u2,1788224400000,,,conversion,30,o2,1788397200000
u3,2026-09-05,,,conversion,10,o3,
"""


def job_config(tmp_path, days=1.0):
    path = tmp_path / "job.yaml"
    path.write_text(f"journey:\n  correction_days: {days}\n")
    return path


def last_click(out):
    result = pd.read_csv(out)
    return result[result.model == "last_click"].set_index("channel").conversions.to_dict()


def test_an_arrival_column_leaves_out_events_that_arrived_past_the_horizon(tmp_path, capsys):
    src = write(tmp_path, "events.csv", ARRIVALS)
    out = tmp_path / "out.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--config",
                 str(job_config(tmp_path)), "--models", "last_click"]) == 0
    # o1 at exactly the horizon counts; its late search touch does not; o2 is gone
    assert last_click(out) == {"email": 1.0, "(unattributed)": 1.0}
    assert "2 events reached Kafka more than journey.correction_days" in \
        capsys.readouterr().out
    # horizon 0: arrival decides nothing
    assert main(["attribute", "--input", str(src), "--out", str(out), "--config",
                 str(job_config(tmp_path, 0)), "--models", "last_click"]) == 0
    assert last_click(out) == {"search": 1.0, "display": 1.0, "(unattributed)": 1.0}
    assert "reached Kafka" not in capsys.readouterr().out
    # without the column every event counts, whatever the horizon
    plain = write(tmp_path, "plain.csv", "\n".join(
        line.rsplit(",", 1)[0] for line in ARRIVALS.splitlines()) + "\n")
    assert main(["attribute", "--input", str(plain), "--out", str(out), "--config",
                 str(job_config(tmp_path)), "--models", "last_click"]) == 0
    assert last_click(out) == {"search": 1.0, "display": 1.0, "(unattributed)": 1.0}


def test_a_parquet_file_gives_the_arrival_in_ms_as_the_archive_keeps_it(tmp_path):
    frame = pd.read_csv(write(tmp_path, "e.csv", EVENTS), dtype=str, keep_default_na=False)
    ts = pd.Series([1788220800000, 1788307200000, 1788393600000, 1788220800000,
                    1788224400000, 1788566400000])
    frame["timestamp"] = ts
    frame["arrival_ms"] = ts + [0, 2 * 86_400_000, 0, 0, 0, -ts[5] - 1]  # -1: none
    frame["revenue"] = pd.to_numeric(frame.revenue)
    src = tmp_path / "events.parquet"
    frame.to_parquet(src, index=False)
    out = tmp_path / "out.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--config",
                 str(job_config(tmp_path)), "--models", "last_click"]) == 0
    assert last_click(out) == {"email": 1.0, "display": 1.0, "(unattributed)": 1.0}


@pytest.mark.parametrize(("value", "message"), [
    ("soon", "events.csv:8: field 'arrival' is not epoch milliseconds or ISO 8601: 'soon'"),
    ("inf", "events.csv:8: field 'arrival' is not epoch milliseconds or ISO 8601: 'inf'"),
])
def test_a_bad_arrival_names_file_line_and_field(tmp_path, capsys, value, message):
    src = write(tmp_path, "events.csv", ARRIVALS + f"u9,2026-09-01,email,,touch,,,{value}\n")
    assert main(["attribute", "--input", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert message in capsys.readouterr().err
    out = tmp_path / "o.csv"
    assert main(["attribute", "--input", str(src), "--out", str(out), "--skip-invalid"]) == 0
    rejects = pd.read_csv(tmp_path / "o.rejects.csv")
    assert rejects[["line", "field", "user_id"]].values.tolist() == [[8, "arrival", "u9"]]


def test_two_arrival_columns_are_refused(tmp_path, capsys):
    header, *rows = ARRIVALS.splitlines()
    src = write(tmp_path, "events.csv", "\n".join(
        [header + ",arrival_ms"] + [row + "," + row.rsplit(",", 1)[1] for row in rows]) + "\n")
    assert main(["attribute", "--input", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "columns arrival and arrival_ms both give the arrival" in capsys.readouterr().err
