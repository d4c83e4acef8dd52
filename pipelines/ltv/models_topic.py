"""The LTV model the stream scores with on the compacted `ltv_models` topic: whoever fits
publishes it under the key "current" (`publish_model`): the topic keeps the latest and the
streaming LTV job (pipelines/flink/ltv/job.py) takes it from there as a broadcast;
`latest_model` reads back the one the stream uses. The message itself (its fields, reading
and checking it) is pipelines/codec/ltv_models.py's. docs/ltv-stream.md.
"""

from __future__ import annotations

from typing import Any

from pipelines.codec.ltv_models import KEY, ModelMessage

__all__ = ["COMPACT", "KEY", "ModelMessage", "latest_model", "publish_model"]

COMPACT = {"cleanup.policy": "compact"}


def publish_model(bootstrap: str, topic: str, message: ModelMessage,
                  client: dict[str, Any] | None = None) -> None:
    """The message to `topic` under KEY, the topic made (compacted) if missing; `client`:
    kafka-python settings (pipelines.kafka.security.for_python)."""
    from pipelines.kafka.io import ensure_topics, producer

    ensure_topics(bootstrap, [topic], config=COMPACT, client=client)
    out = producer(bootstrap, **(client or {}))
    try:
        out.send(topic, message.to_json().encode(), key=KEY.encode()).get(30)
    finally:
        out.close()


def latest_model(bootstrap: str, topic: str, client: dict[str, Any] | None = None,
                 idle_timeout_s: float = 30.0) -> ModelMessage | None:
    """The model the stream scores with once it has read the topic: the latest message
    that is a valid model, whatever its key (the stream sets the others aside); None if
    none is."""
    from pipelines.kafka.reader import TopicReader

    latest = None
    with TopicReader(bootstrap, topic, idle_timeout_s=idle_timeout_s, client=client,
                     what="reading the LTV models of") as reader:
        for record in reader.records():
            if record.value:
                try:
                    latest = ModelMessage.from_json(record.value)
                except ValueError:
                    continue
    return latest
