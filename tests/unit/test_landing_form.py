"""The sample shop's touches given as plain HTTP landings (UTM parameters, a referrer:
pipelines/sources/landing_form.py) get the credits, conversions and counts of the same
touches given as explicit `marketing.*` attributes, through the job's operators."""

from __future__ import annotations

import pytest

from pipelines.codec.otlp import decode_spans
from pipelines.sources.generator import emit, plan_events
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from pipelines.sources.landing_form import TOUCH_FORMS, landing_attributes
from schemas.records import Touchpoint
from tests.spans import stamped
from tests.unit.test_attribution_operators import Job, finish, run


def sample(touches: str) -> list[bytes]:
    sink = CollectingProducer()
    emit(plan_events(300, seed=21), KafkaSpanExporter("unused:0", producer=sink), sink.append,
         batch_size=16, touches=touches)
    return stamped(sink)


def test_a_sample_as_plain_http_landings_gets_the_credits_of_its_explicit_attributes():
    explicit, http = (sample(touches) for touches in TOUCH_FORMS)
    assert len(explicit) == len(http) and explicit != http
    touch_spans = [r for message in http for r in decode_spans(message).records
                   if isinstance(r, Touchpoint)]
    assert {t.channel for t in touch_spans} == {"paid_search", "paid_social", "display",
                                                "email", "affiliate", "organic_search"}
    assert b"marketing.channel" not in b"".join(http)
    by_attributes, by_landings = finish(run(Job(), explicit)), finish(run(Job(), http))
    assert len(by_attributes.credits) > 500
    assert by_landings.credits == by_attributes.credits
    assert by_landings.counts == by_attributes.counts
    assert by_landings.conversions == by_attributes.conversions


def test_a_channel_without_a_landing_form_is_refused() -> None:
    with pytest.raises(ValueError, match="no landing form for channel 'tv'"):
        landing_attributes("u1", "tv", "")
