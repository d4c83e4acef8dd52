"""Session-wide hooks. Each failed test's one-line reason goes to
.pytest_cache/failure-reasons.txt, which `make test` prints last: the final lines of a CI log
(often all that a CI report keeps) then say which tests failed and why."""

from __future__ import annotations

from pathlib import Path

import pytest

REASON_CHARS = 700  # enough for an assertion's message, short enough for a log's tail
_reasons: list[Path] = []  # the file of this session, set when pytest is configured


def pytest_configure(config: pytest.Config) -> None:
    path = config.rootpath / ".pytest_cache" / "failure-reasons.txt"
    path.unlink(missing_ok=True)
    _reasons[:] = [path]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed or not _reasons:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    line = " | ".join(part.strip() for part in message.splitlines() if part.strip())
    if len(line) > REASON_CHARS:
        line = line[:REASON_CHARS] + " ..."
    _reasons[0].parent.mkdir(parents=True, exist_ok=True)
    with _reasons[0].open("a") as out:
        out.write(f"{report.nodeid} ({report.when}): {line}\n")
