"""`seedance ltv fit | score | evaluate`: the holdout comparison on the CDNOW sample against
counts made here with plain Python, a fitted model scored back, the warehouse's orders as
input, and bad input named by file, line and field."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from collections import defaultdict
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.cli import main
from pipelines.ltv.models_topic import ModelMessage
from pipelines.ltv.transactions import read_cdnow
from pipelines.settings.job_config import load_config
from pipelines.store.warehouse import Warehouse
from schemas.rows import ATTRIBUTION_CREDITS
from udfs.ltv.evaluate import HoldoutWindow, holdout_purchases
from udfs.ltv.model import BgNbd, GammaGamma, LtvModel, fit_model, summaries_from_transactions
from udfs.periods import DAY_MS

CDNOW = Path(__file__).resolve().parents[1] / "fixtures" / "cdnow" / "CDNOW_sample.txt"
CALIBRATION_END, HOLDOUT_END = date(1997, 9, 30), date(1998, 6, 30)
EPOCH = date(1970, 1, 1)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def purchase_days() -> dict[str, set[date]]:
    """Each CDNOW customer's purchase days, read with plain Python."""
    days: dict[str, set[date]] = defaultdict(set)
    for line in CDNOW.read_text().splitlines():
        customer, _, day, _, _ = line.split()
        days[customer].add(date(int(day[:4]), int(day[4:6]), int(day[6:])))
    return days


def row(output: str, label: str) -> list[str]:
    """The cells after `label` on the output line that starts with it."""
    for line in output.splitlines():
        if line.startswith(label):
            return line[len(label):].split()
    raise AssertionError(f"no line starts with {label!r} in:\n{output}")


@pytest.fixture(scope="module")
def evaluated() -> str:
    """What `ltv evaluate` prints on CDNOW, FHL's windows (capsys is per test: redirected)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ltv", "evaluate", "--transactions", str(CDNOW), "--format", "cdnow",
                     "--calibration-weeks", "39", "--holdout-weeks", "39"]) == 0
    return out.getvalue()


def test_evaluate_on_cdnow_counts_the_holdout_as_plain_python_does(evaluated: str) -> None:
    days = purchase_days()
    cohort = {c: d for c, d in days.items() if min(d) <= CALIBRATION_END}
    x = {c: sum(day <= CALIBRATION_END for day in d) - 1 for c, d in cohort.items()}
    actual = {c: sum(CALIBRATION_END < day <= HOLDOUT_END for day in d)
              for c, d in cohort.items()}
    assert len(cohort) == 2357 and sum(x.values()) == 2457
    assert "calibration 1997-01-01 to 1997-09-30 (39 weeks), holdout 1997-10-01 to " \
           "1998-06-30 (39 weeks)" in evaluated
    assert row(evaluated, "actual") == [f"{sum(actual.values()):,}"]
    # the naive forecast, the calibration count again (39 weeks / 39 weeks = 1)
    misses = [x[c] - actual[c] for c in cohort]
    naive = row(evaluated, "naive: x again, scaled by 273/273 days")
    assert naive[0] == f"{sum(x.values()):,.1f}"
    assert naive[-2:] == [f"{sum(map(abs, misses)) / len(misses):.3f}",
                         f"{math.sqrt(sum(m * m for m in misses) / len(misses)):.3f}"]
    # the model's forecast: E[Y(39) | x, t_x, T] of the calibration fit, summed
    found = read_cdnow(CDNOW)
    end = float((CALIBRATION_END - EPOCH).days)
    ids, summaries = summaries_from_transactions(*found, end_day=end)
    predicted = fit_model(summaries, 7.0, end).purchases.expected_purchases(39.0, summaries)
    cells = row(evaluated, "BG/NBD E[Y(39 weeks) | x, t_x, T]")
    assert cells[0] == f"{predicted.sum():,.1f}"
    truth = np.array([actual[c] for c in ids])
    assert cells[-2:] == [f"{np.abs(predicted - truth).mean():.3f}",
                         f"{np.sqrt(((predicted - truth) ** 2).mean()):.3f}"]
    # the calibration table: customers and mean actual per x, 7 and more together
    for k in range(8):
        members = [c for c in cohort if (x[c] >= 7 if k == 7 else x[c] == k)]
        cells = row(evaluated, f"  {k}+" if k == 7 else f"   {k} ")
        assert cells[0] == f"{len(members):,}"
        assert cells[2] == f"{sum(actual[c] for c in members) / len(members):.3f}"


def test_evaluate_by_the_calibration_end_day(evaluated: str, capsys) -> None:
    # the data end on 1998-06-30, 39 weeks after 1997-09-30: the same windows
    code, out, _ = run(["ltv", "evaluate", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--calibration-end", "1997-09-30"], capsys)
    assert code == 0 and out == evaluated
    code, out, _ = run(["ltv", "evaluate", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--calibration-weeks", "26", "--holdout-weeks", "60"], capsys)
    assert code == 0
    assert "note: the data end on 1998-06-30, 56 days before the holdout does" in out


@pytest.mark.parametrize(("flags", "message"), [
    ([], "give the calibration period's length (--calibration-weeks) or its last day"),
    (["--calibration-weeks", "80"], "nothing is left to hold out"),
    (["--calibration-weeks", "39", "--holdout-weeks", "0.1"],
     "--holdout-weeks must be positive and a whole number of days long"),
    (["--calibration-end", "1997-13-01"], "--calibration-end: month must be in 1..12"),
])
def test_evaluate_refuses_windows_it_cannot_use(flags: list[str], message: str,
                                                capsys) -> None:
    code, _, err = run(["ltv", "evaluate", "--transactions", str(CDNOW), "--format",
                        "cdnow", *flags], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_fit_writes_a_model_that_score_reads(tmp_path: Path, capsys) -> None:
    model_path, scores = tmp_path / "model.json", tmp_path / "scores.csv"
    code, out, _ = run(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--end", "1997-09-30", "--out", str(model_path)], capsys)
    assert code == 0, out
    model = LtvModel.from_json(model_path.read_text())
    assert model.fitted_through_day == (CALIBRATION_END - EPOCH).days
    assert (round(model.purchases.r, 3), round(model.spend.p, 2)) == (0.243, 6.25)
    assert row(out, "  r ") == [f"{model.purchases.r:.4f}"]
    assert "log-likelihood: BG/NBD -9582.43" in out
    assert "2,357 customers, 946 with repeat purchases" in out

    code, out, err = run(["ltv", "score", "--model", str(model_path), "--transactions",
                          str(CDNOW), "--format", "cdnow", "--horizon-weeks", "26",
                          "--discount-rate", "0.1", "--chunk-rows", "1000",
                          "--out", str(scores)], capsys)
    assert code == 0, err
    assert err.splitlines()[-1].startswith("scored 2,357 of 2,357 customers")
    written = pd.read_csv(scores, dtype={"customer": str}, float_precision="round_trip")
    ids, summaries = summaries_from_transactions(
        *read_cdnow(CDNOW), end_day=float((HOLDOUT_END - EPOCH).days))
    weekly = 1.1 ** (7 / 365.25) - 1
    expected = {
        "customer": ids,
        "frequency": summaries.frequency, "recency": summaries.recency,
        "age": summaries.age, "monetary": summaries.monetary,
        "p_alive": model.purchases.probability_alive(summaries),
        "expected_purchases": model.purchases.expected_purchases(26.0, summaries),
        "expected_order_value": model.spend.expected_order_value(summaries),
        "ltv": model.lifetime_value(summaries, 26.0, weekly),
    }
    assert list(written.columns) == list(expected)
    for name, values in expected.items():
        assert written[name].tolist() == list(values), name
    assert f"LTV {expected['ltv'].sum():,.2f}" in out


def test_fit_writes_the_message_that_cost_allocation_reads(tmp_path: Path, capsys) -> None:
    message_path, config_path = tmp_path / "message.json", tmp_path / "job.yaml"
    config_path.write_text("ltv:\n  horizon_days: 182\n")
    code, out, _ = run(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--end", "1997-09-30", "--out", str(tmp_path / "model.json"),
                        "--message-out", str(message_path), "--config", str(config_path)],
                       capsys)
    assert code == 0, out
    message = ModelMessage.from_json(message_path.read_text())
    assert message.horizon_days == 182 and message.names == ("low", "mid", "high", "top")
    _, summaries = summaries_from_transactions(*read_cdnow(CDNOW), end_day=float(
        (CALIBRATION_END - EPOCH).days))
    values = message.model.lifetime_value(summaries, 182 / 7.0)
    assert message.bounds == pytest.approx(tuple(np.quantile(values, (0.5, 0.8, 0.95))))
    assert f"model message written to {message_path}" in out
    config_path.write_text(f"roi:\n  allocation_weights: ltv_segment\n  ltv_model: "
                           f"{message_path}\n")
    settings = load_config(config_path).computation
    assert settings.segmenter is not None and settings.segmenter.bounds == message.bounds


def test_fit_with_bootstrap_intervals(tmp_path: Path, capsys) -> None:
    model_path = tmp_path / "model.json"
    code, out, _ = run(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--end", "1997-09-30", "--intervals", "20", "--level", "0.8",
                        "--out", str(model_path)], capsys)
    assert code == 0
    assert "80 % interval, 20 bootstrap rounds" in out
    model = json.loads(model_path.read_text())
    for part, names in (("purchases", "r alpha a b"), ("spend", "p q v")):
        for name in names.split():
            value, low, high = re.fullmatch(r"(\S+)\s+\[(\S+), (\S+)\]",
                                            " ".join(row(out, f"  {name} "))).groups()
            assert value == f"{model[part][name]:.4f}" and float(low) <= float(high)


def test_the_warehouse_orders_give_the_files_fit(tmp_path: Path, url: str, capsys) -> None:
    """CDNOW's lines as orders credited in the warehouse (two touches under linear):
    the same customers, days and amounts, so the same model as from the file."""
    found = read_cdnow(CDNOW)
    rows = []
    for n, (customer, day, amount) in enumerate(zip(*found, strict=True)):
        ts = int(day) * DAY_MS + 43_200_000
        stamp = (EPOCH.toordinal() + int(day))
        common = (customer, ts, date.fromordinal(stamp).isoformat())
        rows.append(("last_click", f"o{n}", 0, *common, "search", "", ts, 1.0, amount,
                     "USD", "new"))
        for index, share in enumerate((0.25, 0.75)):
            rows.append(("linear", f"o{n}", index, *common, "email", "", ts, share,
                         share * amount, "USD", "new"))
    rows.append(("last_click", "anonymous", 0, "", 0, "1997-01-01", "search", "", 0, 1.0,
                 1e6, "USD", "new"))
    with Warehouse(url) as warehouse:
        warehouse.store(ATTRIBUTION_CREDITS, rows)
    models = {}
    for name, source in (("file", ["--transactions", str(CDNOW), "--format", "cdnow"]),
                         ("last_click", ["--warehouse", url]),
                         ("linear", ["--warehouse", url, "--attribution-model", "linear"])):
        out_path = tmp_path / f"{name}.json"
        code, out, err = run(["ltv", "fit", *source, "--end", "1997-09-30",
                              "--out", str(out_path)], capsys)
        assert code == 0, err
        models[name] = json.loads(out_path.read_text())
    assert "(orders credited by linear): 6,919 transactions" in out
    for name in ("last_click", "linear"):
        for part in ("purchases", "spend"):
            assert models[name][part] == pytest.approx(models["file"][part], rel=1e-9)


def test_bad_input_is_one_line_naming_file_line_and_field(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("customer,timestamp,amount\nc1,2024-01-01,5\nc2,2024-01-02,-1\n")
    model = tmp_path / "m.json"
    for command in (["fit"], ["evaluate", "--calibration-weeks", "1"],
                    ["score", "--model", str(model)]):
        if command[0] == "score":
            model.write_text(LtvModel(BgNbd(0.2, 4, 0.8, 2.4), GammaGamma(6, 4, 15), 7.0,
                                      10, 0).to_json())
        code, _, err = run(["ltv", *command, "--transactions", str(bad)], capsys)
        assert (code, err) == (2, f"seedance: error: {bad}:3: field 'amount' is negative: "
                                  "-1\n")
    model.unlink()
    code, _, err = run(["ltv", "score", "--model", str(model), "--transactions", str(bad)],
                       capsys)
    assert err == f"seedance: error: --model {model}: file not found (`seedance ltv fit` " \
                  "writes one)\n"
    model.write_text('{"model": "bg/nbd+gamma-gamma"}')
    code, _, err = run(["ltv", "score", "--model", str(model), "--transactions", str(bad)],
                       capsys)
    assert code == 2 and "field 'purchases' is missing" in err
    code, _, err = run(["ltv", "fit", "--transactions", str(CDNOW)], capsys)
    assert code == 2 and "--format cdnow" in err
    code, _, err = run(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                        "--end", "1990-01-01"], capsys)
    assert code == 2 and err == "seedance: error: no transaction on or before 1990-01-01 " \
                                "(--end)\n"


def test_holdout_purchases_count_days_of_the_cohort_in_the_window() -> None:
    window = HoldoutWindow(first_day=0, calibration_end=9, holdout_end=19)
    ids = np.array(["a", "b", "c"])
    customer = np.array(["a", "a", "a", "a", "b", "z", "c", "c"])
    day = np.array([9.9, 10.2, 10.8, 19.5, 20.0, 12.0, 15.0, 16.0])
    # a: day 9 is calibration, day 10 twice is one purchase, day 19 the last of the holdout;
    # b: day 20 is after it; z is no cohort customer
    assert holdout_purchases(ids, customer, day, window).tolist() == [2.0, 0.0, 2.0]
    assert (window.calibration_days, window.holdout_days) == (10.0, 10.0)
    with pytest.raises(ValueError, match="the holdout period has no day"):
        HoldoutWindow(0, 9, 9)


def test_a_transaction_dated_2099_among_2024_is_refused_unless_as_of_is_given(
        tmp_path: Path, capsys) -> None:
    """Scored at 2099 instead, expected purchases fell from hundreds to nothing and evaluate
    held out 27,339 days: the row is named, and --as-of takes the data as they are."""
    rng = np.random.default_rng(3)
    first = date(2024, 1, 1).toordinal()
    lines = [f"c{c},{date.fromordinal(first + d).isoformat()},{rng.gamma(4, 10):.2f}"
             for c in range(300) for d in sorted({int(rng.integers(0, 300)) for _ in
                                                  range(1 + c % 5)})]
    clean = tmp_path / "clean.csv"
    clean.write_text("customer,timestamp,amount\n" + "\n".join(lines) + "\n")
    typo = tmp_path / "typo.csv"
    typo.write_text("customer,timestamp,amount\n" + "\n".join(lines[:40]) + "\n"
                    "c7,2099-01-01,25.00\n" + "\n".join(lines[40:]) + "\n")
    model = tmp_path / "m.json"
    assert run(["ltv", "fit", "--transactions", str(clean), "--out", str(model)], capsys)[0] == 0
    for command in (["fit", "--out", str(tmp_path / "m2.json")],
                    ["score", "--model", str(model), "--out", str(tmp_path / "s.csv")],
                    ["evaluate", "--calibration-weeks", "26"]):
        code, out, err = run(["ltv", *command, "--transactions", str(typo)], capsys)
        assert code == 2 and out == ""
        assert err.startswith(f"seedance: error: {typo}:42: field 'timestamp' is "
                              "2099-01-01, after the run's clock ("), err
        assert err.count("\n") == 1
    last = "2024-10-27"
    outputs = {}
    for name, path in (("clean", clean), ("typo", typo)):
        code, out, err = run(["ltv", "score", "--model", str(model), "--transactions",
                              str(path), "--as-of", last, "--out", str(tmp_path / "s.csv")],
                             capsys)
        assert code == 0, err
        outputs[name] = row(out, "expected purchases")
        code, out, err = run(["ltv", "evaluate", "--calibration-weeks", "26", "--as-of", last,
                              "--transactions", str(path)], capsys)
        assert code == 0, err
        assert f"to {last} (17 weeks)" in out.splitlines()[1]
        outputs[f"{name} evaluate"] = row(out, "actual")
    assert outputs["typo"] == outputs["clean"]
    assert outputs["typo evaluate"] == outputs["clean evaluate"]


def test_a_fit_the_data_cannot_identify_says_so(tmp_path: Path, capsys) -> None:
    """One customer with repeat purchases: the parameters run to the optimiser's bounds
    (e^±25); that is no estimate, and the output says so rather than print a normal fit."""
    one = tmp_path / "one.csv"
    one.write_text("customer,timestamp,amount\nc1,2024-01-01,10\nc1,2024-02-01,12\n"
                   "c1,2024-03-15,9\n")
    code, out, err = run(["ltv", "fit", "--transactions", str(one), "--out",
                          str(tmp_path / "m.json")], capsys)
    assert code == 0
    assert re.search(r"^  b +\S+   at the optimiser's bound: no estimate$", out, re.M), out
    assert "(fitted in" in out and "not an estimate: see the warnings)" in out
    warnings = err.splitlines()
    assert re.fullmatch(r"warning: BG/NBD: (\w+ \S+, )*b 7\.2e\+10 at the optimiser's bound "
                        r"\(e\^-25 to e\^25\): the data do not pin them down, so the fit is "
                        r"a limit of the model, not an estimate", warnings[0]), warnings
    assert warnings[-1].startswith("warning: 1 customers, 1 with repeat purchases: too few "
                                   "to identify the models (at least 100 customers and 30 "
                                   "repeat buyers are wanted)")
    code, out, err = run(["ltv", "evaluate", "--transactions", str(one),
                          "--calibration-weeks", "6"], capsys)
    assert code == 0 and "; not an estimate: see the warnings" in out
    assert "warning: 1 customers, 1 with repeat purchases: too few to identify the model " in err
    # the CDNOW sample: a normal fit, no warning
    code, out, err = run(["ltv", "fit", "--transactions", str(CDNOW), "--format", "cdnow",
                          "--end", "1997-09-30", "--out", str(tmp_path / "c.json")], capsys)
    assert (code, err) == (0, "") and "bound" not in out
