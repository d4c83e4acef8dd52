"""The attribution job's run accounting (the `run_accounting` topic), read back and shown.

Every input record ends somewhere: in = processed + dead-lettered + late + other, where
other = spans this job has no use for (GPU calls go to the GPU cost job). The job keeps the
totals in Flink state and publishes them every 30 s and at the end of a bounded input.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines.kafka.io import read_all


def latest_report(bootstrap: str, topic: str,
                  client: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The newest totals row (read_committed), or None if the job published none yet."""
    rows = [json.loads(value) for _, value in read_all(bootstrap, topic, client=client)]
    return rows[-1] if rows else None


def adds_up(report: dict[str, Any]) -> bool:
    return report["records_in"] == (report["processed"] + report["dead_lettered"]
                                    + report["late"] + report["other"])


def format_report(report: dict[str, Any], dead_letter_topic: str, late_topic: str) -> str:
    check = "adds up" if adds_up(report) else "DOES NOT ADD UP"
    state = "final" if report["final"] else "running"
    return expired_alarm(report, late_topic) + (f"Accounting ({state}): "
            f"{report['records_in']:,} records in ({report['messages']:,} messages) = "
            f"{report['processed']:,} processed + {report['dead_lettered']:,} dead-lettered "
            f"({dead_letter_topic}) + {report['late']:,} late ({late_topic}) + "
            f"{report['other']:,} not for this job -- {check}")


def expired_alarm(report: dict[str, Any], late_topic: str) -> str:
    """The alarm for events that counted by arrival but came behind the state the job
    keeps (lost: they are among the late, reason state_expired); '' when there is none."""
    expired = report.get("expired", 0)
    if not expired:
        return ""
    return (f"ALARM: {expired:,} events arrived within the correction horizon but behind the "
            f"journeys the job still keeps: they are NOT in the results ({late_topic}, "
            "reason state_expired). The watermark ran ahead of them: a partition declared "
            "idle with records unread, or a catch-up drift over the correction reach "
            "(docs/operations.md).\n")
