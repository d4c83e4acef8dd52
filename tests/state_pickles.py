"""What the stateful operators keep in Flink's keyed state, and which classes its pickles
name: the attribution job's journeys (`AttributeJourneys`), duplicate check (`DedupOrders`)
and data-driven models in their two phases, the fit (`FitDataDrivenModels`, counts per
path) and the crediting (`CreditDataDriven`, the converted journeys by bucket), driven over
a generated plan through the state fakes (tests.flink_fakes), as
tests/unit/test_attribution_operators.py drives them; and a reader of the globals (module,
name) a pickle (and every pickle inside it: the operators store pickled bytes in a
pickled-bytes state) refers to.

A class a pickle in state names by its module must stay importable under that name for as
long as such state may be restored (udfs/pickle_paths.py); tests/unit/test_pickle_pins.py
checks it, and tests/fixtures/state/make_pre_move_pickles.py kept the bytes the code before
the move of udfs/ into packages stored. (It ran with this module as it was before the fit
had two phases: one operator, whose "settled-periods" held the converted journeys
themselves; the crediting operator keeps them now.)"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pipelines.codec.frame import NO_TIME, frame, newest_start_ms
from pipelines.flink.attribution.credit import CreditDataDriven
from pipelines.flink.attribution.decode import DecodeOtlp
from pipelines.flink.attribution.dedup import DedupOrders
from pipelines.flink.attribution.fit import FitDataDrivenModels
from pipelines.flink.attribution.journeys import AttributeJourneys
from pipelines.flink.attribution.support import (
    ACCOUNTING,
    CLOSED_JOURNEYS,
    DEAD_LETTERS,
    LATE_EVENTS,
    ORDERS,
    PATH_COUNTS,
)
from pipelines.sources.generator import emit, plan_events
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from tests.flink_fakes import (
    FakeContext,
    FakeListState,
    FakeMapState,
    FakeValueState,
    Harness,
    KeyState,
    StateStore,
    Timers,
)
from tests.spans import stamp_of, stamped
from udfs.attribution.models import DATA_DRIVEN_MODELS, PER_CONVERSION_MODELS, ModelParams
from udfs.journeys.arrival import correction_reach_ms
from udfs.journeys.rules import JourneyConfig

PROJECT_PACKAGES = ("udfs", "schemas", "pipelines", "jobs")
SLACK_MS = 5 * 60_000  # the job's default allowed out-of-orderness ...
MAX_FUTURE_MS = 5 * 60_000  # ... and event_time.max_future_s
BUCKETS = 4
REFIT_MS = 6 * 3600 * 1000


class NamesRecorder(pickle.Unpickler):
    """Unpickles as pickle.loads does, recording every global the pickle names."""

    def __init__(self, data: bytes, names: set[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self.names = names

    def find_class(self, module: str, name: str) -> Any:
        self.names.add((module, name))
        return super().find_class(module, name)


def pickled_names(data: bytes, names: set[tuple[str, str]] | None = None,
                  ) -> set[tuple[str, str]]:
    """The globals `data` (a pickle) names, and those of every pickle among the bytes it
    holds, however deep (state of Types.PICKLED_BYTE_ARRAY holds pickled bytes)."""
    names = set() if names is None else names
    for value in _bytes_within(NamesRecorder(data, names).load()):
        if value[:1] == b"\x80":  # a pickle (protocol 2 or later), or bytes that look so
            # raw bytes may only start like a pickle
            with contextlib.suppress(Exception):
                pickled_names(value, names)
    return names


def _bytes_within(value: Any, depth: int = 0) -> Iterator[bytes]:
    if isinstance(value, bytes | bytearray):
        yield bytes(value)
    elif depth < 8 and isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _bytes_within(item, depth + 1)
    elif depth < 8 and isinstance(value, dict):
        for item in (*value.keys(), *value.values()):
            yield from _bytes_within(item, depth + 1)


def project_names(names: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(module, name) for module, name in names
            if module.split(".")[0] in PROJECT_PACKAGES}


def stored_bytes(store: StateStore | KeyState) -> Iterator[tuple[str, bytes]]:
    """(state name, bytes) of every value a store holds, as the fakes pickled them."""
    keys = store.by_key.values() if isinstance(store, StateStore) else [store]
    for key_state in keys:
        for name, state in key_state.states.items():
            if isinstance(state, FakeValueState):
                values = [] if state.stored is None else [state.stored]
            elif isinstance(state, FakeListState):
                values = list(state.stored)
            else:
                assert isinstance(state, FakeMapState)
                values = list(state.stored.values())
            for value in values:
                yield name, value


def stream(users: int = 40, seed: int = 5) -> list[bytes]:
    """A generated plan's messages, each with its arrival time."""
    plan = plan_events(users, seed=seed)
    sink = CollectingProducer()
    emit(plan, KafkaSpanExporter("unused:0", producer=sink), sink.append, batch_size=16)
    return stamped(sink)


class AttributionOperators:
    """One parallel instance of the attribution job's decoder, duplicate check, journeys,
    fit and crediting, fed one partition, the watermark following it (tests/unit/
    test_attribution_operators.py's Job, without its accounting): the journeys' closed
    journeys go to the crediting (input 1, keyed by bucket), their counts per path to the
    fit (one key), and what the fit sends to the crediting (input 2) as the bucket it
    names."""

    def __init__(self, observe: bool = False) -> None:
        journey = JourneyConfig()
        # with `observe`: the project classes every stored value names, gathered after each
        # call (a fit's pending periods stay in state only until its timer fires, a
        # bucket's closed journeys only until their period is credited)
        self.named: set[tuple[str, str]] | None = set() if observe else None
        reach = correction_reach_ms(journey.correction_ms, MAX_FUTURE_MS)
        self.decode = DecodeOtlp("auto", "spans", BUCKETS, correction_ms=journey.correction_ms)
        self.store, self.timers = StateStore(), Timers()
        self.dedup_store, self.dedup_timers = StateStore(), Timers()
        self.fit_state, self.fit_timers = KeyState(), Timers()
        # the crediting sets no timers (the fit's weights carry its watermark)
        self.credit_store, self.credit_timers = StateStore(), Timers()
        self.attributing = Harness(
            AttributeJourneys(journey, PER_CONVERSION_MODELS, ModelParams(), REFIT_MS,
                              process_mode=False, buckets=BUCKETS, reach_ms=reach),
            self.store, self.timers)
        self.deduping = Harness(DedupOrders(BUCKETS, journey.duplicate_order_ms,
                                            process_mode=False, source="spans"),
                                self.dedup_store, self.dedup_timers)
        self.fitting = Harness(FitDataDrivenModels(DATA_DRIVEN_MODELS, ModelParams(),
                                                   horizon_ms=reach, buckets=BUCKETS),
                               self.fit_state, self.fit_timers)
        self.crediting = Harness(CreditDataDriven(reach), self.credit_store,
                                 self.credit_timers)
        self.newest = NO_TIME
        self.offset = 0

    def stores(self) -> dict[str, StateStore | KeyState]:
        return {"attribute-journeys": self.store, "dedup-orders": self.dedup_store,
                "fit-models": self.fit_state, "credit-models": self.credit_store}

    def feed(self, message: bytes) -> None:
        event_time = newest_start_ms(message, 2**62)
        framed = frame(message, 0, self.offset, stamp_of(message) or 0, event_time,
                       self.newest)
        self.offset += 1
        self.newest = max(self.newest, event_time)
        for out in self.decode.process_element(framed, FakeContext(self.timers)):
            if out[0] in (DEAD_LETTERS, LATE_EVENTS, ACCOUNTING):
                continue
            if out[0] is ORDERS:
                self._collect_dedup(self.deduping.process(out[1], key=out[1][0]))
            else:
                self._collect(self.attributing.process(out, key=out[0]))
        self._observe()
        if self.newest != NO_TIME:
            self.advance(self.newest - SLACK_MS - 1)
            self._observe()

    def _observe(self, *stores: StateStore | KeyState) -> None:
        if self.named is not None:
            for store in stores or self.stores().values():
                for _, data in stored_bytes(store):
                    self.named |= project_names(pickled_names(data))

    def advance(self, watermark: int) -> None:
        """Every timer the watermark passes fires, in time order (the duplicate check's
        first: it is upstream)."""
        self.dedup_timers.watermark = max(self.dedup_timers.watermark, watermark)
        for timer in self.dedup_timers.due():
            self.dedup_timers.registered.discard(timer)
            self._collect_dedup(self.deduping.on_timer(*timer))
        self.timers.watermark = self.fit_timers.watermark = max(self.timers.watermark,
                                                                 watermark)
        while self.timers.due() or self.fit_timers.due():
            for timer in self.timers.due():
                self.timers.registered.discard(timer)
                self._collect(self.attributing.on_timer(*timer))
            for timer in self.fit_timers.due():
                self.fit_timers.registered.discard(timer)
                self._collect_fit(self.fitting.on_timer(*timer))

    def _collect_dedup(self, outputs: Iterable[Any]) -> None:
        for out in outputs:
            if len(out) == 3:  # withdrawn or admitted orders, to their bucket
                self._collect(self.attributing.process(out, key=out[0]))

    def _collect(self, outputs: Iterable[Any]) -> None:
        for out in outputs:
            if not isinstance(out, tuple):
                continue
            tag, value = out
            if tag is CLOSED_JOURNEYS:  # kept by its bucket, to be credited there
                list(self.crediting.process_input(1, value, key=value[0]))
                self._observe(self.credit_store)
            elif tag is PATH_COUNTS:
                self._collect_fit(self.fitting.process(value))
                self._observe(self.fit_state)

    def _collect_fit(self, outputs: Iterable[tuple[Any, ...]]) -> None:
        """The fit's weights (and journeys an earlier version of it kept), each to the
        bucket it names."""
        for out in outputs:
            list(self.crediting.process_input(2, out, key=out[0]))
            self._observe(self.credit_store)


def operators_over(messages: list[bytes], share: float = 0.7,
                   observe: bool = False) -> AttributionOperators:
    """The operators after the first `share` of the messages: state of every kind (books
    with waiting batches, pending and settled fit periods, orders waiting for the
    duplicate check) is held then."""
    operators = AttributionOperators(observe)
    for message in messages[:int(len(messages) * share)]:
        operators.feed(message)
    return operators


def plain(value: Any) -> Any:
    """A value as JSON can hold it, with the classes and dtypes it is made of: what a
    loaded pickle is compared with."""
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "values": [plain(v) for v in value.tolist()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"class": class_path(type(value)),
                "fields": {f.name: plain(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"class": class_path(type(value)),
                "fields": {name: plain(getattr(value, name)) for name in value._fields}}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[plain(k), plain(v)] for k, v in value.items()]}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def class_path(cls: type) -> str:
    """module:qualified name, as a pickle names the class."""
    return f"{cls.__module__}:{cls.__qualname__}"
