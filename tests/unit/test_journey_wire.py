"""The compact forms between operators and in state give back exactly what went in."""

import pickle

from pipelines.journey_wire import (
    close_ts_of_wire,
    events_from_wire,
    events_to_wire,
    journeys_from_wire,
    journeys_to_wire,
    state_from_wire,
    state_to_wire,
)
from schemas.records import Conversion, Touchpoint
from udfs.journeys import ConvertedJourney, JourneyState, NonConvertingJourney, close_ts


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


def test_states_and_journeys_come_back_equal():
    state = JourneyState([T1, T2], 5)
    assert state_from_wire(roundtrip(state_to_wire(state))) == state
    assert state_from_wire(state_to_wire(JourneyState())) == JourneyState()
    journeys = [ConvertedJourney(O1, (T1, T2), "repeat"), NonConvertingJourney("u", (T1,), 99),
                ConvertedJourney(O1._replace(user_id=""), (), "unknown")]
    wire = roundtrip(journeys_to_wire(journeys))
    assert journeys_from_wire(wire) == journeys
    assert [close_ts_of_wire(w) for w in wire] == [close_ts(j) for j in journeys]
