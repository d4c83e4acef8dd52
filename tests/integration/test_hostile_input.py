"""No input can stop the attribution job: random bytes, messages of 900 kB and 5 MB, null
values and JSON of encodings the job does not read, mixed into good telemetry on a topic of
four partitions read at parallelism 2. The job finishes, every record is accounted for, each
bad one is a dead letter (with its partition and offset, cut to a size the dead-letter topic
takes), and the good data's credits are those of the batch reference."""

from __future__ import annotations

import base64
import json
import math
import random

from pipelines.codec.dead_letters import DEAD_LETTER_PAYLOAD_BYTES
from pipelines.flink.attribution.job import run_job
from pipelines.kafka.io import producer, read_all
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import plan_events
from tests.job_io import credit_key, credit_rows, messages
from tests.reference import TEST_HORIZON_MS, reference_credits
from tests.spans import encoded, plain, stamp_of

MB = 2**20
ZIPKIN = json.dumps([{"traceId": "5b8efff798038103d269b633813fc60c", "id": "eee19b7ec3c1b174",
                      "name": "checkout", "timestamp": 1756684800000000, "duration": 1200,
                      "tags": {"order.id": "o-9", "order.revenue": "10"}}]).encode()
JAEGER = json.dumps({"data": [{"traceID": "5b8efff798038103d269b633813fc60c", "spans": [{
    "traceID": "5b8efff798038103d269b633813fc60c", "spanID": "eee19b7ec3c1b174",
    "operationName": "checkout", "startTime": 1756684800000000, "duration": 1200,
    "tags": [{"key": "order.id", "type": "string", "value": "o-9"}]}],
    "processes": {"p1": {"serviceName": "shop"}}}]}).encode()


def test_bad_records_are_dead_letters_and_the_job_runs_on(kafka, flink, job_config, topic):
    rng = random.Random(7)
    bad = {"random": rng.randbytes(1000), "900 kB": rng.randbytes(900_000),
           "5 MB": rng.randbytes(5 * MB), "null": None, "zipkin": ZIPKIN, "jaeger": JAEGER}
    plan = plan_events(150, seed=8)
    good = encoded(plan)

    spans = topic("spans", 4, {"max.message.bytes": str(8 * MB)})
    raw = producer(kafka, max_request_size=8 * MB)
    step = len(good) // (len(bad) + 1)
    values = list(good)
    for i, value in enumerate(bad.values()):
        values.insert((i + 1) * step, value)
    for i, value in enumerate(values):
        # a null value goes with a key (a tombstone, as a compacting producer sends it)
        raw.send(spans, plain(value), key=b"gone" if value is None else None, partition=i % 4,
                 timestamp_ms=stamp_of(value))
    raw.flush()
    raw.close()

    config = job_config.replace("topics", spans=spans).replace("flink", parallelism=2)
    config = config.replace("attribution", refit_every_s=6 * 3600.0)
    run_job(config, kafka, env=flink.environment(config))

    # the good data's credits are unchanged
    expected = {(c.model, c.order_id, c.touch_index, c.channel): c.revenue
                for c in reference_credits(plan, config.attribution.models, 6 * 3600.0)}
    rows = credit_rows(kafka, config.topics.credits)
    got = {credit_key(r): r["revenue"] for r in rows}
    assert len(rows) == len(got) and got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)

    # every bad record is a dead letter that says why and where it came from
    dead = messages(kafka, config.topics.dead_letter)
    sizes = [len(value) for _, value in read_all(kafka, config.topics.dead_letter)]
    assert max(sizes) < MB  # the topic's default limit
    for name, value in bad.items():
        if value is None:
            (letter,) = [d for d in dead if d["reason"] == "null_value"]
        else:
            (letter,) = [d for d in dead if d["payload_bytes"] == len(value) and
                         base64.b64decode(d["payload_base64"]) == value[:DEAD_LETTER_PAYLOAD_BYTES]]
            assert letter["reason"] == {"zipkin": "unknown_encoding",
                                        "jaeger": "unknown_encoding"}.get(
                name, "malformed_otlp_proto"), name
            assert letter["payload_truncated"] == (len(value) > DEAD_LETTER_PAYLOAD_BYTES)
        at = values.index(value)
        assert (letter["partition"], letter["offset"]) == (at % 4, at // 4), name
    invalid = sum(e.kind == "invalid_conversion" for e in plan.events)
    assert len(dead) == len(bad) + len(plan.malformed) + invalid

    # every record is accounted for
    (report,) = [r for r in messages(kafka, config.topics.accounting) if r["final"]]
    assert report["messages"] == len(values)
    assert report["dead_lettered"] == len(dead)
    assert report["late"] == late_beyond(plan, TEST_HORIZON_MS)
    assert report["records_in"] == report["processed"] + report["dead_lettered"] \
        + report["late"] + report["other"]
    assert report["other"] == report["other_gpu_calls"] + report["other_tracing_spans"]
    assert report["other_gpu_calls"] > 0 and report["other_tracing_spans"] > 0
