"""The data-driven models in the stream: one key for the whole stream keeps the path counts
of every closed journey and credits each refit period's conversions when it closes."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor

from pipelines.codec import credit_messages
from pipelines.flink.legacy_state import LegacyFitState, pending_period
from pipelines.flink.operator_support import PICKLE_PROTOCOL, collect_garbage_rarely, put_all
from udfs.data_driven import PathCounts, Period, conversion_credit_rows
from udfs.journey_columns import ConvertedJourneys, concat_converted
from udfs.models import ModelParams


class FitDataDrivenModels(KeyedProcessFunction):  # type: ignore[misc]
    """One key for the whole stream: path counts of every closed journey, and the credits
    of each period's conversions from the models refitted when the period closes.

    Journeys arrive grouped by refit period (udfs.data_driven.Period: the conversions, and
    only counts per path of the journeys that did not convert) and wait in state until
    the watermark passes the period's end."""

    def __init__(self, models: tuple[str, ...], params: ModelParams,
                 process_mode: bool = False) -> None:
        self.models = models
        self.params = params
        self.process_mode = process_mode

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        # One entry per distinct path, (row, path, conversions, non-conversions), so a
        # refit stores only the paths it counted (not all of them, tens of thousands, as
        # one value); the row keeps first-seen order across a restore.
        self.cells = runtime_context.get_map_state(
            MapStateDescriptor("path-cells", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        # Closed journeys waiting for their period to end: one entry per arrival, keyed
        # "period end:arrival number", so a timer reads only the periods it settles
        # (reading one list of everything pending at every timer grew with the backlog).
        self.pending = runtime_context.get_map_state(
            MapStateDescriptor("pending-periods", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.legacy = LegacyFitState(runtime_context)  # as earlier versions stored them
        self.waiting: dict[int, list[str]] | None = None  # period end -> its entries' keys
        self.arrivals = 0
        # The counts in memory between refits (one key: this operator alone writes them);
        # read from state once after a (re)start, not once per refit, and the refit's
        # index of their paths kept with them.
        self.path_counts: PathCounts | None = None

    def _counts(self) -> PathCounts:
        if self.path_counts is None:
            legacy = self.legacy.take_counts()
            if legacy:  # state written by an earlier version: moved into the map
                self.path_counts = PathCounts(legacy)
                self.path_counts.changed.update(legacy)
            else:
                self.path_counts = PathCounts({path: [conversions, non_conversions]
                                               for _, path, conversions, non_conversions
                                               in sorted(self.cells.values())})
        return self.path_counts

    def _store_counts(self, counts: PathCounts) -> None:
        if counts.changed:
            rows, cells = counts.rows(), counts.counts
            put_all(self.cells, {orjson.dumps(path).decode(): (rows[path], path, *cells[path])
                                 for path in counts.changed}, self.process_mode)
            counts.changed.clear()

    def _waiting(self) -> dict[int, list[str]]:
        """The pending entries' keys by period end, in arrival order (from the stored keys
        once after a (re)start)."""
        if self.waiting is None:
            keys = self.pending.keys()  # noqa: SIM118 (Flink's map state, not a dict)
            arrivals = sorted((int(number), int(end), key) for key in keys
                              for end, number in [key.split(":")])
            self.waiting = {}
            for _, end, key in arrivals:
                self.waiting.setdefault(end, []).append(key)
            self.arrivals = arrivals[-1][0] + 1 if arrivals else 0
            legacy = self.legacy.take_periods()
            if legacy:  # state written by an earlier version: moved into the map
                self._add(legacy)
        return self.waiting

    def _add(self, periods: list[Period]) -> None:
        waiting, entries = self._waiting(), {}
        for period in periods:
            key = f"{period[0]}:{self.arrivals}"
            self.arrivals += 1
            entries[key] = pickle.dumps(period, PICKLE_PROTOCOL)
            waiting.setdefault(period[0], []).append(key)
        put_all(self.pending, entries, self.process_mode)

    def process_element(self, payload: bytes, ctx: KeyedProcessFunction.Context) -> None:
        periods: list[Period] = pickle.loads(payload)
        self._add(periods)
        for end in {period[0] for period in periods}:
            ctx.timer_service().register_event_time_timer(end)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[bytes]:
        # Every period the watermark has passed is settled now, in period order (a replay
        # moves the watermark over many periods at once).
        watermark = max(timestamp, ctx.timer_service().current_watermark())
        waiting = self._waiting()
        due = sorted(end for end in waiting if end <= watermark)
        if not due:
            return
        counts = self._counts()
        for end in due:
            converted: list[ConvertedJourneys] = []
            unconverted: dict[tuple[str, ...], float] = {}
            for key in waiting.pop(end):
                _, journeys, paths = pending_period(self.pending.get(key))
                self.pending.remove(key)
                converted.append(journeys)
                for path, count in paths.items():
                    unconverted[path] = unconverted.get(path, 0.0) + count
            yield from credit_messages.encode_chunks_bytes(conversion_credit_rows(
                counts, concat_converted(converted), unconverted, self.models,
                self.params))
        self._store_counts(counts)
