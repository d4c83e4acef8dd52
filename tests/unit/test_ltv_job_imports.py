"""The ltv streaming job's Python never imports scipy.optimize: importing it (its HiGHS
extension) inside Flink's embedded Python while the job's other operators start hung the
whole job at INITIALIZING. Scoring needs scipy.special only; fitting imports the optimiser
when it runs."""

from __future__ import annotations

import subprocess
import sys


def modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", f"import sys\n{code}\n"
                           "print('\\n'.join(sys.modules))"],
                          capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_the_ltv_job_imports_no_optimiser():
    loaded = modules_after("import pipelines.flink.ltv.job, pipelines.flink.ltv.scores")
    assert "udfs.ltv.model" in loaded  # it does score with the models
    assert not {m for m in loaded if m.startswith("scipy.optimize")}


def test_a_fit_brings_the_optimiser_in_when_it_runs():
    """The same check sees the optimiser once a fit has run: the import moved into the fit,
    not out of the package."""
    loaded = modules_after(
        "import numpy as np\nfrom udfs.ltv.model import CustomerSummaries, BgNbd\n"
        "BgNbd.fit(CustomerSummaries.of(np.array([0., 2, 5, 1]), np.array([0., 20, 30, 5]),"
        " np.array([38., 39, 39, 30])))")
    assert "scipy.optimize" in loaded
