"""The compact forms between operators and in state give back exactly what went in."""

import pickle

from pipelines.codec.journey_wire import (
    converted_from_wire,
    events_from_wire,
    events_to_wire,
    periods_to_wire,
    state_from_wire,
    state_to_wire,
)
from schemas.records import Conversion, Touchpoint
from udfs.attribution.data_driven import period_end
from udfs.journeys.rules import ConvertedJourney, JourneyState, NonConvertingJourney


def roundtrip(value):
    return pickle.loads(pickle.dumps(value))


T1 = Touchpoint("u", 10, "email", "spring", "t1", "s1")
T2 = Touchpoint("u", 20, "display", "", "t2", "s2")
O1 = Conversion("u", 20, "o1", 9.5, "EUR", "t3", "s3")


def test_events_keep_their_types_and_each_kind_its_order():
    back = events_from_wire(roundtrip(events_to_wire([T2, O1, T1])))
    assert back == [T2, T1, O1]
    assert [type(e) for e in back] == [Touchpoint, Touchpoint, Conversion]
    assert back[2].revenue == 9.5 and back[0].channel == "display"


def test_states_come_back_equal():
    state = JourneyState([T1, T2], 5)
    assert state_from_wire(roundtrip(state_to_wire(state))) == state
    assert state_from_wire(state_to_wire(JourneyState())) == JourneyState()


def test_closed_journeys_travel_to_the_fit_grouped_by_period_with_what_a_fit_needs():
    day = 86_400_000
    converted = ConvertedJourney(O1, (T1, T2), "repeat")
    journeys = [converted, NonConvertingJourney("u", (T1,), 99),
                NonConvertingJourney("v", (T1._replace(user_id="v"),), 98),
                NonConvertingJourney("w", (T2,), day + 5),
                ConvertedJourney(O1._replace(user_id="", ts_ms=day + 1), (), "unknown")]
    wire = roundtrip(periods_to_wire(journeys, lambda ts: period_end(ts, day)))
    assert [(end, len(c), paths) for end, c, paths in wire] == [
        (day - 1, 1, {("email",): 2.0}), (2 * day - 1, 1, {("display",): 1.0})]
    (back,) = converted_from_wire(wire[0][1])
    # the same journey for the models, without its trace and span ids
    assert back.stage == "repeat" and back.conversion == O1._replace(trace_id="", span_id="")
    assert back.touches == tuple(t._replace(trace_id="", span_id="") for t in (T1, T2))
    assert converted_from_wire(wire[1][1])[0].touches == ()
