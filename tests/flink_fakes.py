"""In-memory stand-ins for what Flink hands a (keyed) process function: keyed state, the
runtime context that opens it, the timer service and the context of each call; and a
harness that drives one function through them and collects what it yields.

The unit tests drive the operators of pipelines/ (flink_job, gpu_cost_job, roi_job) in one
process with these. State is pickled on the way in and unpickled on the way out, as
Flink's state backends serialise it, so an operator never keeps a live reference into its
state. A checkpoint is a deep copy of the state (a StateStore or a KeyState) and of the
Timers; a restore is a new operator opened over that copy.

    store, timers = StateStore(), Timers()
    harness = Harness(SomeKeyedFunction(...), store, timers)
    out = harness.process(element, key=3)         # process_element, as key 3
    timers.watermark = 1_000
    for timestamp, key in timers.due():           # fire what the watermark passed
        timers.registered.discard((timestamp, key))
        out += harness.on_timer(timestamp, key)
    restored = Harness(SomeKeyedFunction(...), copy.deepcopy(store), copy.deepcopy(timers))
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

MIN_WATERMARK = -2**63  # Flink's watermark before the first one

S = TypeVar("S", "FakeValueState", "FakeListState", "FakeMapState")


class Descriptor(Protocol):
    """What the fakes read of a state descriptor (PyFlink's StateDescriptor has it)."""

    name: str


class Named:
    """A state descriptor: only its name matters here (a PyFlink ValueStateDescriptor,
    MapStateDescriptor or ListStateDescriptor does as well)."""

    def __init__(self, name: str) -> None:
        self.name = name


class FakeValueState:
    """PyFlink's ValueState: one value, None until updated."""

    def __init__(self) -> None:
        self.stored: bytes | None = None

    def value(self) -> Any:
        return None if self.stored is None else pickle.loads(self.stored)

    def update(self, value: Any) -> None:
        self.stored = pickle.dumps(value)

    def clear(self) -> None:
        self.stored = None


class FakeListState:
    """PyFlink's ListState. get() gives a generator, as PyFlink's does (truthy even when
    nothing was added; its thread mode may give None there: the operators read it as
    `list(state.get() or [])`)."""

    def __init__(self) -> None:
        self.stored: list[bytes] = []

    def get(self) -> Iterator[Any]:
        return (pickle.loads(value) for value in self.stored)

    def add(self, value: Any) -> None:
        self.stored.append(pickle.dumps(value))

    def add_all(self, values: Iterable[Any]) -> None:
        self.stored += [pickle.dumps(value) for value in values]

    def update(self, values: Iterable[Any]) -> None:
        self.stored = [pickle.dumps(value) for value in values]

    def clear(self) -> None:
        self.stored = []

    def __iter__(self) -> Iterator[Any]:
        return self.get()


class FakeMapState:
    """PyFlink's MapState. get() of a missing key gives None, as PyFlink's does; put_all
    takes a dict, as its declared API (and its thread mode) does."""

    def __init__(self) -> None:
        self.stored: dict[Any, bytes] = {}

    def get(self, key: Any) -> Any:
        value = self.stored.get(key)
        return None if value is None else pickle.loads(value)

    def put(self, key: Any, value: Any) -> None:
        self.stored[key] = pickle.dumps(value)

    def put_all(self, values: Mapping[Any, Any]) -> None:
        if not isinstance(values, Mapping):
            raise TypeError(f"MapState.put_all takes a dict, not {type(values).__name__}")
        self.stored.update({key: pickle.dumps(value) for key, value in values.items()})

    def remove(self, key: Any) -> None:
        self.stored.pop(key, None)  # as Flink's: removing a missing key does nothing

    def contains(self, key: Any) -> bool:
        return key in self.stored

    def items(self) -> list[tuple[Any, Any]]:
        return [(key, pickle.loads(value)) for key, value in self.stored.items()]

    def keys(self) -> list[Any]:
        return list(self.stored)

    def values(self) -> list[Any]:
        return [pickle.loads(value) for value in self.stored.values()]

    def is_empty(self) -> bool:
        return not self.stored

    def clear(self) -> None:
        self.stored.clear()

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


def state_name(descriptor: Descriptor | str) -> str:
    return descriptor if isinstance(descriptor, str) else descriptor.name


class KeyState:
    """The state one key holds, by descriptor name, created on first use. It is also the
    runtime context of a function that only ever sees one key (open(key_state)), and where
    a test reads or seeds that key's state (`states[name].stored`, or get_state(...))."""

    def __init__(self) -> None:
        self.states: dict[str, FakeValueState | FakeListState | FakeMapState] = {}

    def _get(self, descriptor: Descriptor | str, kind: type[S]) -> S:
        name = state_name(descriptor)
        state = self.states.setdefault(name, kind())
        if not isinstance(state, kind):
            raise TypeError(f"state {name!r} is a {type(state).__name__}, not a "
                            f"{kind.__name__}")
        return state

    def get_state(self, descriptor: Descriptor | str) -> FakeValueState:
        return self._get(descriptor, FakeValueState)

    def get_list_state(self, descriptor: Descriptor | str) -> FakeListState:
        return self._get(descriptor, FakeListState)

    def get_map_state(self, descriptor: Descriptor | str) -> FakeMapState:
        return self._get(descriptor, FakeMapState)


class StateStore:
    """Every key's state, by key (one parallel instance's keyed state backend), and the
    key being processed. A checkpoint is copy.deepcopy(store); a restore, a new operator
    opened over it (runtime_context())."""

    def __init__(self) -> None:
        self.by_key: dict[Any, KeyState] = {}
        self.current_key: Any = None

    def of(self, key: Any) -> KeyState:
        """The key's state (created empty on first use)."""
        return self.by_key.setdefault(key, KeyState())

    def current(self) -> KeyState:
        return self.of(self.current_key)

    def runtime_context(self) -> FakeRuntimeContext:
        return FakeRuntimeContext(self)


class FakeRuntimeContext:
    """What open() gets: each state it hands out is the named state of whichever key is
    current when it is used (the store's current_key), as Flink's keyed state is."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def get_state(self, descriptor: Descriptor | str) -> CurrentKeyValueState:
        return CurrentKeyValueState(self.store, state_name(descriptor))

    def get_list_state(self, descriptor: Descriptor | str) -> CurrentKeyListState:
        return CurrentKeyListState(self.store, state_name(descriptor))

    def get_map_state(self, descriptor: Descriptor | str) -> CurrentKeyMapState:
        return CurrentKeyMapState(self.store, state_name(descriptor))


class _CurrentKey:
    def __init__(self, store: StateStore, name: str) -> None:
        self.store, self.name = store, name


class CurrentKeyValueState(_CurrentKey):
    """A ValueState of the current key (FakeRuntimeContext.get_state)."""

    def _state(self) -> FakeValueState:
        return self.store.current().get_state(self.name)

    def value(self) -> Any:
        return self._state().value()

    def update(self, value: Any) -> None:
        self._state().update(value)

    def clear(self) -> None:
        self._state().clear()


class CurrentKeyListState(_CurrentKey):
    """A ListState of the current key (FakeRuntimeContext.get_list_state)."""

    def _state(self) -> FakeListState:
        return self.store.current().get_list_state(self.name)

    def get(self) -> Iterator[Any]:
        return self._state().get()

    def add(self, value: Any) -> None:
        self._state().add(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._state().add_all(values)

    def update(self, values: Iterable[Any]) -> None:
        self._state().update(values)

    def clear(self) -> None:
        self._state().clear()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._state())


class CurrentKeyMapState(_CurrentKey):
    """A MapState of the current key (FakeRuntimeContext.get_map_state)."""

    def _state(self) -> FakeMapState:
        return self.store.current().get_map_state(self.name)

    def get(self, key: Any) -> Any:
        return self._state().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._state().put(key, value)

    def put_all(self, values: Mapping[Any, Any]) -> None:
        self._state().put_all(values)

    def remove(self, key: Any) -> None:
        self._state().remove(key)

    def contains(self, key: Any) -> bool:
        return self._state().contains(key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state().items()

    def keys(self) -> list[Any]:
        return self._state().keys()

    def values(self) -> list[Any]:
        return self._state().values()

    def is_empty(self) -> bool:
        return self._state().is_empty()

    def clear(self) -> None:
        self._state().clear()

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class Timers:
    """One operator's timers, for all its keys, as (timestamp, key), and the watermark
    (and processing time) it has seen. Nothing fires by itself: a test moves `watermark`
    and calls on_timer for what due() gives, discarding each from `registered` as it
    fires. A checkpoint holds a deep copy."""

    def __init__(self, watermark: int = MIN_WATERMARK) -> None:
        self.watermark = watermark
        self.registered: set[tuple[int, Any]] = set()
        self.processing_time = 0
        self.processing_registered: set[tuple[int, Any]] = set()

    def register(self, timestamp: int, key: Any = None) -> None:
        """An event-time timer (registering one twice is one timer, as in Flink)."""
        self.registered.add((timestamp, key))

    def due(self) -> list[tuple[int, Any]]:
        """The event-time timers at or before the watermark, in time order (still
        registered)."""
        return sorted(timer for timer in self.registered if timer[0] <= self.watermark)

    def latest(self) -> int:
        """The latest event-time timer's time."""
        return max(timestamp for timestamp, _ in self.registered)

    def service(self, key: Any = None) -> FakeTimerService:
        return FakeTimerService(self, key)


class FakeTimerService:
    """ctx.timer_service(): the timers as one key sees them."""

    def __init__(self, timers: Timers, key: Any = None) -> None:
        self.timers, self.key = timers, key

    def current_watermark(self) -> int:
        return self.timers.watermark

    def register_event_time_timer(self, timestamp: int) -> None:
        self.timers.register(timestamp, self.key)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self.timers.registered.discard((timestamp, self.key))

    def current_processing_time(self) -> int:
        return self.timers.processing_time

    def register_processing_time_timer(self, timestamp: int) -> None:
        self.timers.processing_registered.add((timestamp, self.key))


class FakeContext:
    """The ctx of process_element and on_timer: the current key, the element's (or the
    timer's) timestamp, and the key's timer service."""

    def __init__(self, timers: Timers, key: Any = None, timestamp: int | None = None) -> None:
        self.timers, self.key, self._timestamp = timers, key, timestamp

    def timer_service(self) -> FakeTimerService:
        return self.timers.service(self.key)

    def get_current_key(self) -> Any:
        return self.key

    def timestamp(self) -> int | None:
        return self._timestamp


def outputs(result: Iterable[Any] | None) -> list[Any]:
    """What a call yielded, as a list (a function that yields nothing may return None)."""
    return [] if result is None else list(result)


class Harness:
    """One parallel instance of a (keyed) process function, driven as Flink drives it:
    opened over `state` on construction, each call made as its key (the store's current
    key switched first; a KeyState is one key's state, whatever the key) with a
    FakeContext over `timers`, and what it yields collected into a list."""

    def __init__(self, function: Any, state: StateStore | KeyState,
                 timers: Timers | None = None) -> None:
        self.function, self.state = function, state
        self.timers = Timers() if timers is None else timers
        function.open(state.runtime_context() if isinstance(state, StateStore) else state)

    def _as(self, key: Any) -> None:
        if isinstance(self.state, StateStore):
            self.state.current_key = key

    def process(self, value: Any, key: Any = None, timestamp: int | None = None) -> list[Any]:
        """process_element(value, ctx) as `key`."""
        self._as(key)
        return outputs(self.function.process_element(
            value, FakeContext(self.timers, key, timestamp)))

    def process_input(self, number: int, value: Any, key: Any = None) -> list[Any]:
        """process_element<number>(value, ctx) of a co-process function, as `key`."""
        self._as(key)
        method = getattr(self.function, f"process_element{number}")
        return outputs(method(value, FakeContext(self.timers, key)))

    def on_timer(self, timestamp: int, key: Any = None) -> list[Any]:
        """on_timer(timestamp, ctx) as `key` (the caller takes the timer out of
        timers.registered, if it was one)."""
        self._as(key)
        return outputs(self.function.on_timer(timestamp, FakeContext(self.timers, key,
                                                                     timestamp)))
