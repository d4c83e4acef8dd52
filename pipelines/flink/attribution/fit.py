"""The data-driven models in the stream: one key for the whole stream keeps the path counts
of every closed journey and credits each refit period's conversions when it closes."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from pipelines.codec import credit_messages, table_messages
from pipelines.flink.attribution.legacy_state import LegacyFitState, pending_period
from pipelines.flink.attribution.support import (
    PICKLE_PROTOCOL,
    closed_periods_ends,
    collect_garbage_rarely,
    put_all,
    stored_periods,
)
from udfs.attribution import (
    ModelParams,
    PathCounts,
    Period,
    conversion_credit_rows,
    merged_period,
    period_runs,
)
from udfs.journeys import ConvertedJourneys, settle_step_ms

# the key of the fit's credit messages: every version of a period's credits in one
# partition, in order
FIT_KEY = ("data-driven",)
FINAL = 2**63 - 1  # the watermark at the end of the input (a drain, a bounded run)


class FitDataDrivenModels(KeyedProcessFunction):  # type: ignore[misc]
    """One key for the whole stream: path counts of every closed journey, and the credits
    of each period's conversions from the models refitted when the period closes.

    Journeys arrive grouped by refit period (udfs.attribution.data_driven.Period: the conversions,
    and only counts per path of the journeys that did not convert) and wait in state until
    the watermark passes the period's end. A correction (late events changed closed
    journeys: udfs/journeys/corrections.py) retracts journeys and adds others; where it
    concerns a period already settled, that period and every later one are settled again
    from the counts before it (each fit counts every journey closed up to its period's
    end), and their conversions credited again. Settled periods are kept for
    `horizon_ms` (the correction horizon) for that."""

    def __init__(self, models: tuple[str, ...], params: ModelParams,
                 process_mode: bool = False, horizon_ms: int = 0) -> None:
        self.models = models
        self.params = params
        self.process_mode = process_mode
        self.horizon_ms = horizon_ms

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        # One entry per distinct path, (row, path, conversions, non-conversions), so a
        # refit stores only the paths it counted (not all of them, tens of thousands, as
        # one value); the row keeps first-seen order across a restore.
        self.cells = runtime_context.get_map_state(
            MapStateDescriptor("path-cells", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        # Closed journeys waiting for their period to end: one entry per arrival, keyed
        # "n<arrival number>:<its periods' ends>" and stored as it came (the pickled
        # periods), so a timer reads only the arrivals with periods it settles (reading
        # one list of everything pending at every timer grew with the backlog). Entries
        # of a single period, keyed "period end:arrival number": corrections, and
        # arrivals stored by earlier versions.
        self.pending = runtime_context.get_map_state(
            MapStateDescriptor("pending-periods", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        # settled periods that a correction may restate: period end -> pickled
        # (converted journeys, counts per path of the others)
        self.settled = runtime_context.get_map_state(
            MapStateDescriptor("settled-periods", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.settled_periods: dict[int, tuple[ConvertedJourneys, dict]] | None = None
        self.last_settled = runtime_context.get_state(
            ValueStateDescriptor("last-settled-period", Types.LONG()))
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
        for path in counts.dropped:
            self.cells.remove(orjson.dumps(path).decode())
        counts.dropped.clear()
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
            arrivals = sorted((number, end, key) for key in keys
                              for number, end in _entry_periods(key))
            self.waiting = {}
            for _, end, key in arrivals:
                self.waiting.setdefault(end, []).append(key)
            self.arrivals = arrivals[-1][0] + 1 if arrivals else 0
            legacy = self.legacy.take_periods()
            if legacy:  # state written by an earlier version: moved into the map
                self._add(legacy)
        return self.waiting

    def _add_arrival(self, ends: list[int], periods: bytes) -> None:
        """A step's closed journeys, stored as they came: one entry for all its periods."""
        waiting = self._waiting()
        key = _arrival_key(self.arrivals, ends)
        self.arrivals += 1
        put_all(self.pending, {key: periods}, self.process_mode)
        for end in ends:
            waiting.setdefault(end, []).append(key)

    def _add(self, periods: list[Period], sign: int = 1) -> None:
        waiting, entries = self._waiting(), {}
        for period in periods:
            key = f"{period[0]}:{self.arrivals}"
            self.arrivals += 1
            entries[key] = pickle.dumps(period if sign > 0 else (*period, sign),
                                        PICKLE_PROTOCOL)
            waiting.setdefault(period[0], []).append(key)
        put_all(self.pending, entries, self.process_mode)

    def _last_settled(self) -> int:
        last = self.last_settled.value()
        return -(2**63) if last is None else int(last)

    def _settled(self) -> dict[int, tuple[ConvertedJourneys, dict]]:
        if self.settled_periods is None:
            self.settled_periods = {end: pickle.loads(value)
                                    for end, value in self.settled.items()}
        return self.settled_periods

    def process_element(self, payload: bytes, ctx: KeyedProcessFunction.Context
                        ) -> Iterator[bytes]:
        arrival = closed_periods_ends(payload)
        if arrival is not None:
            ends = arrival[0]
            self._add_arrival(*arrival)
        else:
            periods: list[Period] | tuple[list[Period], list[Period]] = pickle.loads(payload)
            if isinstance(periods, tuple):  # a correction: (retracted, added)
                retracted, added = periods
                self._add(retracted, -1)
                self._add(added)
                periods = [*retracted, *added]
            else:
                self._add(periods)
            ends = [period[0] for period in periods]
        if ctx.timer_service().current_watermark() >= FINAL:
            # Journeys after the end of the input: they came from an attribution subtask
            # whose output was idle when the final watermark passed the others (Flink
            # leaves idle inputs out of the watermark), and no timer fires any more.
            yield from self._settle(FINAL)
            return
        last = self._last_settled()
        for end in set(ends):
            # a settled period is settled again with the next period that closes (all
            # corrections since in one pass), or at the end of the input
            ctx.timer_service().register_event_time_timer(end if end > last else FINAL)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[bytes]:
        yield from self._settle(max(timestamp, ctx.timer_service().current_watermark()))

    def _settle(self, watermark: int) -> Iterator[bytes]:
        """Every period the watermark has passed is settled now, in period order (a replay
        moves the watermark over many periods at once); a correction of a settled period
        settles it and the later ones again, from the counts before it."""
        waiting = self._waiting()
        last = self._last_settled()
        due = sorted(end for end in waiting if end <= watermark)
        if not due or (due[-1] <= last and watermark < FINAL):
            return  # only corrections of settled periods: they wait for the next period
        self.last_settled.update(max(last, due[-1]))
        counts = self._counts()
        settled = self._settled() if self.horizon_ms else {}
        again = sorted(end for end in settled if end >= due[0])
        for end in reversed(again):
            counts.retract(*settled[end])
        read: dict[str, dict[int, Period]] = {}  # arrivals read: their periods left
        for end in sorted({*again, *due}):
            parts = [(*settled[end], 1)] if end in settled else []
            for key in waiting.pop(end, []):
                if key.startswith("n"):  # an arrival: the period of it that ends here
                    if key not in read:
                        read[key] = {period[0]: period for period in stored_periods(
                            pickle.loads(self.pending.get(key)))}
                    _, journeys, paths = read[key].pop(end)
                    parts.append((journeys, paths, 1))
                    continue
                _, journeys, paths, *sign = pending_period(self.pending.get(key))
                self.pending.remove(key)
                parts.append((journeys, paths, sign[0] if sign else 1))
            converted, unconverted = merged_period(parts)
            for message in credit_messages.encode_chunks_bytes(conversion_credit_rows(
                    counts, converted, unconverted, self.models, self.params)):
                yield table_messages.keyed(FIT_KEY, message)
            if self.horizon_ms:
                settled[end] = (converted, unconverted)
                self.settled.put(end, pickle.dumps(settled[end], PICKLE_PROTOCOL))
        # a correction reaches back at most the horizon (and the step the settled journeys
        # trail by): older periods are final. Not at the end of the input: journeys that
        # come after it (see process_element) settle their period again.
        final = watermark - self.horizon_ms - 2 * settle_step_ms(self.horizon_ms) \
            if watermark < FINAL else -(2**63)
        for end in [end for end in settled if end < final]:
            del settled[end]
            self.settled.remove(end)
        self._store_counts(counts)
        self._keep_unsettled(read)

    def _keep_unsettled(self, read: dict[str, dict[int, Period]]) -> None:
        """Arrivals this settling read: gone once every period of theirs is settled; the
        periods still waiting kept under a key naming only them (the same arrival number:
        the same place in their periods' order)."""
        waiting = self._waiting()
        for key, left in read.items():
            self.pending.remove(key)
            if not left:
                continue
            number = _entry_periods(key)[0][0]
            kept = _arrival_key(number, sorted(left))
            put_all(self.pending, {kept: pickle.dumps(period_runs(list(left.values())),
                                                      PICKLE_PROTOCOL)}, self.process_mode)
            for end in left:
                waiting[end] = [kept if entry == key else entry for entry in waiting[end]]


def _arrival_key(number: int, ends: list[int]) -> str:
    return f"n{number}:{','.join(map(str, ends))}"


def _entry_periods(key: str) -> list[tuple[int, int]]:
    """(arrival number, period end) of each period a pending entry's key names."""
    if key.startswith("n"):
        number, ends = key[1:].split(":")
        return [(int(number), int(end)) for end in ends.split(",")]
    end, number = key.split(":")
    return [(int(number), int(end))]
