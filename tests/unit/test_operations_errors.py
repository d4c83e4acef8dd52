"""Operators' mistakes get one line naming what to fix: the option with an impossible day,
the file that is not the Parquet it claims to be."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "option"), [
    (["--date", "2026-02-30"], "--date"),
    (["--from", "2026-02-30", "--to", "2026-03-02"], "--from"),
    (["--from", "2026-02-27", "--to", "2026-13-01"], "--to"),
])
def test_an_impossible_reconcile_day_names_its_option(argv, option, capsys) -> None:
    code, err = run(["reconcile", *argv, "--no-dispatch"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"seedance: error: {option} ") and "2026-" in err, err


def test_a_file_that_is_not_parquet_is_named(tmp_path: Path, capsys) -> None:
    noise = tmp_path / "events.parquet"
    noise.write_bytes(bytes(range(256)) * 20)
    code, err = run(["attribute", "--input", str(noise), "--out",
                     str(tmp_path / "out.csv")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"seedance: error: {noise}: ") and "Parquet" in err, err
