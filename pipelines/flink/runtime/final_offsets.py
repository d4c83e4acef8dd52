"""Where a stopped job's sources stood, committed for their consumer group; and what a job
started without the savepoint of the one before it is missing.

A KafkaSource commits its offsets to its group when a checkpoint completes, asynchronously,
from its own consumer. At a stop with savepoint (`flink stop`, with or without --drain) the
job ends right after the savepoint completes, and the commit of that savepoint's offsets
goes down with the closing consumer: the group is left where the checkpoint before had it,
so a job started from the group's offsets reads those messages again and credits their
orders a second time. The savepoint holds where each source split stood; once the job has
ended, `commit_final_position` commits those offsets for the job's group.

`seedance cluster submit` records here what it submitted (job, config, bootstrap) in the
cluster's folder, so that a stop knows the job's group, topics and Kafka settings.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipelines.flink.jobs import STREAMING_JOBS, StreamingJob
from pipelines.kafka.group_offsets import commit_offsets, committed
from pipelines.kafka.security import for_python
from pipelines.settings.job_config import StreamingJobConfig, load_config

SUBMITTED = "submitted"  # the cluster folder's record of submitted jobs, one file per job id
_JOB_ID = re.compile(r"[0-9a-f]{32}")


def record_submission(home: Path, job_id: str, job: str, config_file: Path,
                      bootstrap: str) -> None:
    folder = home / SUBMITTED
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job_id}.json").write_text(json.dumps(
        {"job": job, "config": str(config_file.resolve()), "bootstrap": bootstrap}))


def submission(home: Path, job_id: str) -> dict[str, Any] | None:
    """What `record_submission` kept of a job, None for a job submitted otherwise."""
    if not _JOB_ID.fullmatch(job_id):
        return None
    try:
        record: dict[str, Any] = json.loads((home / SUBMITTED / f"{job_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return record


def savepoint_offsets(savepoint: str, topics: Iterable[str]) -> dict[str, dict[int, int]]:
    """Each topic's partitions and the offset its source would have read next, from the
    source readers' state in a savepoint on a local file system: each split is kept as
    Flink's versioned serialization (version, length) of the Kafka connector's split (the
    topic as Java's writeUTF, partition, next offset, stopping offset). The enumerator's
    copies carry no position (a negative offset) and are passed over."""
    folder = Path(re.sub(r"^file:(//)?", "", savepoint))
    data = [path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()]
    offsets: dict[str, dict[int, int]] = {}
    for topic in topics:
        name = topic.encode()
        marker = struct.pack(">H", len(name)) + name
        length = struct.pack(">i", len(marker) + 20)
        for blob in data:
            at = blob.find(marker)
            while at >= 0:
                if at >= 4 and blob[at - 4:at] == length and at + len(marker) + 12 <= len(blob):
                    partition, offset = struct.unpack_from(">iq", blob, at + len(marker))
                    if offset >= 0:
                        found = offsets.setdefault(topic, {})
                        found[partition] = max(found.get(partition, 0), offset)
                at = blob.find(marker, at + 1)
    return offsets


def commit_final_position(home: Path, job_id: str, savepoint: str) -> str:
    """After a stop with savepoint of a job `seedance cluster submit` started: commit where
    its sources stood in `savepoint` for its group; what was done, in one line."""
    record = submission(home, job_id)
    if record is None:
        return (f"job {job_id} was not submitted with `seedance cluster submit`: its "
                "consumer group's offsets are left as its last checkpoint committed them")
    job = STREAMING_JOBS[record["job"]]
    config = load_config(Path(record["config"]))
    topics = job.read_topics(config)
    offsets = savepoint_offsets(savepoint, topics)
    if not offsets:
        return (f"no source position found in {savepoint} (not a local savepoint?): group "
                f"{job.group(config)} is left as the last checkpoint committed it")
    commit_offsets(record["bootstrap"], for_python(dict(config.kafka.properties)),
                   job.group(config), offsets)
    record["savepoint"] = savepoint
    (home / SUBMITTED / f"{job_id}.json").write_text(json.dumps(record))
    where = "; ".join(f"{topic} " + ", ".join(f"{p}:{o}" for p, o in sorted(parts.items()))
                      for topic, parts in sorted(offsets.items()))
    return f"consumer group {job.group(config)} committed at the savepoint's position ({where})"


def last_savepoint(home: Path, job: StreamingJob, config_file: Path) -> str | None:
    """The savepoint of the newest stop of `job` with this config recorded here."""
    folder = home / SUBMITTED
    records = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime) \
        if folder.is_dir() else []
    for path in reversed(records):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("job") == job.name and record.get("savepoint") and \
                record.get("config") == str(config_file.resolve()):
            return str(record["savepoint"])
    return None


def start_warning(job: StreamingJob, config: StreamingJobConfig, bootstrap: str,
                  savepoint: str | None = None) -> str | None:
    """For a job started without a savepoint whose group already read its topics (a job
    before it had state): how its results will differ from a continuation; else None."""
    client = for_python(dict(config.kafka.properties))
    read = committed(bootstrap, client, job.group(config), job.read_topics(config))
    messages = sum(sum(parts.values()) for parts in read.values())
    if not messages:
        return None
    group = job.group(config)
    start = config.input.starting_offsets
    if start == "earliest":
        how = ("it reads its topics from the start again (input.starting_offsets: "
               "earliest) and writes again every result the earlier job wrote: readers that "
               "append rather than upsert by key count them twice")
    else:
        where = ("from where the group stands" if start == "committed"
                 else "from the end of its topics, skipping what arrived since (latest)")
        how = (f"it reads on {where} but without {job.state}: results that depend on "
               "messages read before the stop are computed without them")
    resume = f"--from-savepoint {savepoint}" if savepoint else "--from-savepoint PATH"
    return (f"warning: consumer group {group} has already read {messages:,} messages of "
            f"{', '.join(sorted(read))}, so an earlier {job.title} job held state; started "
            f"without its savepoint, {how}. To continue that job instead, submit with "
            f"{resume} (the savepoint of its stop).")
