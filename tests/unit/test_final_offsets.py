"""The pieces of `seedance cluster stop`'s commit of the final position that need no
cluster: reading the source position out of a savepoint's bytes, the record of submitted
jobs, and every job's consumer group as its sources name it
(tests/integration/test_drain_offsets.py runs it all on a real cluster)."""

from __future__ import annotations

import importlib
import inspect
import struct
from pathlib import Path

from pipelines.flink.jobs import STREAMING_JOBS
from pipelines.flink.runtime.final_offsets import (
    commit_final_position,
    record_submission,
    savepoint_offsets,
    submission,
)

NO_STOPPING_OFFSET = -(2**63)


def split_state(topic: str, partition: int, offset: int) -> bytes:
    """A source reader's split as Flink keeps it: version, length, then the connector's
    split (writeUTF topic, partition, next offset, stopping offset)."""
    name = topic.encode()
    body = struct.pack(">H", len(name)) + name + struct.pack(">iqq", partition, offset,
                                                             NO_STOPPING_OFFSET)
    return struct.pack(">ii", 1, len(body)) + body


def test_the_position_is_read_from_the_readers_splits_only(tmp_path: Path) -> None:
    folder = tmp_path / "savepoint-1"
    (folder / "state").mkdir(parents=True)
    name = b"spans"
    enumerator_copy = struct.pack(">H", len(name)) + name + struct.pack(">iqq", 0, -2, -1)
    (folder / "_metadata").write_bytes(
        b"\x00junk spans more junk" + split_state("spans", 0, 41) + enumerator_copy
        + split_state("spans-other", 1, 999) + split_state("spans", 2, 7))
    (folder / "state" / "part").write_bytes(split_state("spans", 1, 12))
    offsets = savepoint_offsets(folder.as_uri(), ["spans", "absent"])
    assert offsets == {"spans": {0: 41, 1: 12, 2: 7}}
    assert savepoint_offsets(f"file:{folder}", ["spans-other"]) == {"spans-other": {1: 999}}


def test_a_job_submitted_otherwise_is_left_as_it_is(tmp_path: Path) -> None:
    job_id = "0123456789abcdef0123456789abcdef"
    line = commit_final_position(tmp_path, job_id, str(tmp_path / "savepoint"))
    assert line.startswith(f"job {job_id} was not submitted with `seedance cluster submit`")
    record_submission(tmp_path, job_id, "attribution", Path("jobs/config/streaming.yaml"),
                      "broker:9092")
    assert submission(tmp_path, job_id) == {
        "job": "attribution", "config": str(Path("jobs/config/streaming.yaml").resolve()),
        "bootstrap": "broker:9092"}
    assert submission(tmp_path, "../../etc/passwd") is None


def test_each_jobs_group_is_the_one_its_sources_commit_as() -> None:
    """The registry's group suffix is the one the job's build_source calls pass."""
    suffixes = {job.group_suffix for job in STREAMING_JOBS.values()} - {""}
    for job in STREAMING_JOBS.values():
        source = inspect.getsource(importlib.import_module(job.builder_path.split(":")[0]))
        named = {s for s in suffixes if f'"{s}"' in source}
        assert named == ({job.group_suffix} - {""}), (job.name, named)
