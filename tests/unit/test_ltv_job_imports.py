"""The ltv streaming job's Python never imports scipy.optimize: importing it (its HiGHS
extension) inside Flink's embedded Python while the job's other operators start hung the
whole job at INITIALIZING. Scoring needs scipy.special only; fitting imports the optimiser
when it runs."""

from __future__ import annotations

import subprocess
import sys


def modules_after_importing(*names: str) -> set[str]:
    code = ("import sys\n" + "".join(f"import {n}\n" for n in names)
            + "print('\\n'.join(sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


def test_the_ltv_job_imports_no_optimiser():
    loaded = modules_after_importing("pipelines.flink.ltv_job",
                                     "pipelines.flink.score_customers")
    assert "udfs.ltv" in loaded  # it does score with the models
    assert not {m for m in loaded if m.startswith("scipy.optimize")}


def test_the_check_sees_the_optimiser_when_it_is_imported():
    loaded = modules_after_importing("udfs.ltv_fit", "scipy.optimize")
    assert "scipy.optimize" in loaded
