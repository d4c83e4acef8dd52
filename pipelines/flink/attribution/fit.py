"""The data-driven models in the stream, the fit's half: one key adds up the counts per
path that every bucket's closed journeys send (udfs.attribution.two_phase), refits the
models when a refit period closes, and sends each bucket the fitted weights of the paths
its conversions of that period took; the buckets credit their conversions with them
(credit.py). The fit's work is per distinct path, whatever the parallelism."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from pipelines.flink.attribution.legacy_state import LegacyFitState, pending_period
from pipelines.flink.attribution.support import (
    FITTED_WEIGHTS,
    KEPT_JOURNEYS,
    PICKLE_PROTOCOL,
    collect_garbage_rarely,
    put_all,
    stored_periods,
)
from udfs.attribution import (
    CountPeriod,
    FittedModels,
    PathCounts,
    Period,
    journeys_paths,
    merged_counts,
    weights_for,
)
from udfs.journeys import ConvertedJourneys, bucket_of, settle_step_ms

FINAL = 2**63 - 1  # the watermark at the end of the input (a drain, a bounded run)
NO_BUCKET = -1  # a part with no conversions (an earlier version's, moved)

# A pending entry: a bucket's counts of the periods one message closed, added (1) or
# retracted (-1: a correction): [(bucket, [CountPeriod], sign)]
Entry = list[tuple[int, list[CountPeriod], int]]
# One period's parts of an entry: (bucket, conversions per path, the others, sign)
Part = tuple[int, dict, dict, int]
# A settled period: (conversions per path by bucket, non-conversions per path)
Settled = tuple[dict[int, dict], dict]


class FitDataDrivenModels(KeyedProcessFunction):  # type: ignore[misc]
    """One key for the whole stream: the counts per path of every closed journey, and a
    refit when a refit period closes.

    Counts arrive from each bucket (journeys.py) as (bucket, sequence number, counts of
    the periods added, of those retracted) and wait in state until the watermark passes
    their period's end; then the models are refitted on every journey closed up to it,
    and each bucket that converted in the period gets the weights of its paths
    (FITTED_WEIGHTS: one message per bucket for all the periods one settling settles,
    with the sequence number of its last message counted, so it credits once it holds
    every journey counted). A correction of a period already settled
    settles that period and every later one again, from the counts before it, and their
    buckets get the new weights. Settled periods are kept for `horizon_ms` for that.
    Journeys an earlier version kept here (pending or settled) are handed to their
    buckets once after a restore (KEPT_JOURNEYS), their counts kept here."""

    def __init__(self, models: tuple[str, ...], params: Any, process_mode: bool = False,
                 horizon_ms: int = 0, buckets: int = 1) -> None:
        self.models = models
        self.params = params
        self.process_mode = process_mode
        self.horizon_ms = horizon_ms
        self.buckets = buckets  # to hand journeys an earlier version kept to their bucket

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        # One entry per distinct path, (row, path, conversions, non-conversions), so a
        # refit stores only the paths it counted; the row keeps first-seen order.
        self.cells = runtime_context.get_map_state(
            MapStateDescriptor("path-cells", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        # Counts waiting for their period to end: one entry per message, keyed
        # "c<arrival number>:<its periods' ends>", so a timer reads only the entries with
        # periods it settles. (Earlier versions kept journeys here: "n..." and
        # "<end>:<number>" entries, moved once after a restore.)
        self.pending = runtime_context.get_map_state(
            MapStateDescriptor("pending-periods", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        # settled periods that a correction may restate: period end -> pickled Settled
        self.settled = runtime_context.get_map_state(
            MapStateDescriptor("settled-periods", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.settled_periods: dict[int, Settled] | None = None
        self.last_settled = runtime_context.get_state(
            ValueStateDescriptor("last-settled-period", Types.LONG()))
        # each bucket's last message counted: its sequence number
        self.seen_state = runtime_context.get_map_state(
            MapStateDescriptor("buckets-seen", Types.INT(), Types.LONG()))
        self.seen: dict[int, int] | None = None
        self.legacy = LegacyFitState(runtime_context)  # as earlier versions stored them
        self.waiting: dict[int, list[str]] | None = None  # period end -> its entries' keys
        self.arrivals = 0
        self.path_counts: PathCounts | None = None
        self.moved = False  # journeys an earlier version kept: handed over since (re)start

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

    def _seen(self) -> dict[int, int]:
        if self.seen is None:
            self.seen = {int(bucket): int(seq) for bucket, seq in self.seen_state.items()}
        return self.seen

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
        return self.waiting

    def _put_entry(self, number: int, entry: Entry, listed: bool = True) -> str:
        """Store an entry; `listed`: add it to its periods' keys (last)."""
        ends = sorted({end for _, periods, _ in entry for end, *_ in periods})
        key = f"c{number}:{','.join(map(str, ends))}"
        put_all(self.pending, {key: pickle.dumps(entry, PICKLE_PROTOCOL)}, self.process_mode)
        if listed:
            waiting = self._waiting()
            for end in ends:
                waiting.setdefault(end, []).append(key)
        return key

    def _last_settled(self) -> int:
        last = self.last_settled.value()
        return -(2**63) if last is None else int(last)

    def _settled(self) -> dict[int, Settled]:
        if self.settled_periods is None:
            self.settled_periods = {end: pickle.loads(value)
                                    for end, value in self.settled.items()}
        return self.settled_periods

    def process_element(self, message: tuple[int, int, list[CountPeriod], list[CountPeriod]],
                        ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        yield from self._move_kept_journeys()
        bucket, seq, added, retracted = message
        seen = self._seen()
        if seq > seen.get(bucket, 0):
            seen[bucket] = seq
            self.seen_state.put(bucket, seq)
        entry: Entry = [(bucket, periods, sign) for periods, sign in ((added, 1),
                                                                      (retracted, -1))
                        if periods]
        if not entry:
            return
        self._waiting()
        self._put_entry(self.arrivals, entry)
        self.arrivals += 1
        if ctx.timer_service().current_watermark() >= FINAL:
            # Journeys after the end of the input: they came from an attribution subtask
            # whose output was idle when the final watermark passed the others (Flink
            # leaves idle inputs out of the watermark), and no timer fires any more.
            yield from self._settle(FINAL)
            return
        last = self._last_settled()
        for end in {end for _, periods, _ in entry for end, *_ in periods}:
            # a settled period is settled again with the next period that closes (all
            # corrections since in one pass), or at the end of the input
            ctx.timer_service().register_event_time_timer(end if end > last else FINAL)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
                 ) -> Iterator[Any]:
        yield from self._move_kept_journeys()
        yield from self._settle(max(timestamp, ctx.timer_service().current_watermark()))

    def _settle(self, watermark: int) -> Iterator[Any]:
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
            by_bucket, unconverted = settled[end]
            counts.add_counts(merged_counts((c, 1) for c in by_bucket.values()),
                              unconverted, -1)
        read: dict[str, dict[int, list[Part]]] = {}  # entries read: their periods left
        weights: dict[int, list[tuple[int, FittedModels]]] = {}  # by bucket, in period order
        for end in sorted({*again, *due}):
            parts: list[Part] = []
            if end in settled:
                by_bucket, unconverted = settled[end]
                parts += [(bucket, paths, {}, 1) for bucket, paths in by_bucket.items()]
                parts.append((NO_BUCKET, {}, unconverted, 1))
            for key in waiting.pop(end, []):
                if key not in read:
                    read[key] = _by_period(pickle.loads(self.pending.get(key)))
                parts += read[key].pop(end)
            of_bucket: dict[int, list[tuple[dict, int]]] = {}
            for bucket, converted, _, sign in parts:
                if converted:
                    of_bucket.setdefault(bucket, []).append((converted, sign))
            by_bucket = {}
            for bucket, bucket_parts in of_bucket.items():
                paths = bucket_parts[0][0] if len(bucket_parts) == 1 and \
                    bucket_parts[0][1] > 0 else merged_counts(bucket_parts)
                if paths:
                    by_bucket[bucket] = paths
            unconverted = merged_counts((u, s) for _, _, u, s in parts)
            counts.add_counts(merged_counts((c, 1) for c in by_bucket.values()), unconverted)
            if by_bucket:
                fitted = counts.fit(self.models, self.params)
                for bucket, paths in by_bucket.items():
                    weights.setdefault(bucket, []).append((end, weights_for(fitted, paths)))
            if self.horizon_ms:
                settled[end] = (by_bucket, unconverted)
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
        # each bucket's weights of every period settled now, in one message
        seen = self._seen()
        for bucket in sorted(weights):
            yield bucket, FITTED_WEIGHTS, seen.get(bucket, 0), watermark, weights[bucket]

    def _keep_unsettled(self, read: dict[str, dict[int, list[Part]]]) -> None:
        """Entries this settling read: gone once every period of theirs is settled; the
        periods still waiting kept under a key naming only them (the same arrival number:
        the same place in their periods' order)."""
        waiting = self._waiting()
        for key, left in read.items():
            self.pending.remove(key)
            if not left:
                continue
            number = _entry_periods(key)[0][0]
            kept = self._put_entry(number, _as_entry(left), listed=False)
            for end in left:  # in its place among the period's entries
                waiting[end] = [kept if entry == key else entry for entry in waiting[end]]

    def _move_kept_journeys(self) -> Iterator[Any]:
        """Once after a (re)start: journeys an earlier version kept here, pending or
        settled, go to their buckets (KEPT_JOURNEYS: the bucket credits them when their
        period's weights come), and their counts stay here in place of them."""
        if self.moved:
            return
        self.moved = True
        legacy = self.legacy.take_periods()
        kept = [key for key in self.pending.keys()  # noqa: SIM118 (Flink's map state)
                if not key.startswith("c")]
        if legacy or kept:
            self._waiting()
            for period in legacy:
                yield from self._hand_over(self.arrivals, [period], 1)
                self.arrivals += 1
            for key in kept:
                number = _entry_periods(key)[0][0]
                stored = self.pending.get(key)
                self.pending.remove(key)
                for end in {end for _, end in _entry_periods(key)}:
                    self.waiting[end].remove(key)  # type: ignore[index]
                if key.startswith("n"):
                    yield from self._hand_over(number, stored_periods(pickle.loads(stored)), 1)
                else:
                    end, journeys, paths, *sign = pending_period(stored)
                    yield from self._hand_over(number, [(end, journeys, paths)],
                                               sign[0] if sign else 1)
        settled = self._settled()
        for end, value in list(settled.items()):
            if isinstance(value[0], ConvertedJourneys):  # (converted journeys, the others)
                by_bucket: dict[int, dict] = {}
                for bucket, part in self._split(value[0]).items():
                    yield bucket, KEPT_JOURNEYS, end, 1, part
                    by_bucket[bucket] = journeys_paths(part)
                settled[end] = (by_bucket, dict(value[1]))
                self.settled.put(end, pickle.dumps(settled[end], PICKLE_PROTOCOL))

    def _split(self, journeys: ConvertedJourneys) -> dict[int, ConvertedJourneys]:
        buckets = np.fromiter((bucket_of(user, self.buckets)
                               for user in journeys.user_id.tolist()), np.int64,
                              len(journeys))
        return {int(bucket): journeys.select(buckets == bucket)
                for bucket in np.unique(buckets)}

    def _hand_over(self, number: int, periods: list[Period], sign: int) -> Iterator[Any]:
        entry: Entry = []
        for end, journeys, unconverted in periods:
            for bucket, part in self._split(journeys).items():
                yield bucket, KEPT_JOURNEYS, end, sign, part
                entry.append((bucket, [(end, journeys_paths(part), {})], sign))
            entry.append((NO_BUCKET, [(end, {}, dict(unconverted))], sign))
        self._put_entry(number, entry)


def _by_period(entry: Entry) -> dict[int, list[Part]]:
    parts: dict[int, list[Part]] = {}
    for bucket, periods, sign in entry:
        for end, converted, unconverted in periods:
            parts.setdefault(end, []).append((bucket, converted, unconverted, sign))
    return parts


def _as_entry(left: dict[int, list[Part]]) -> Entry:
    return [(bucket, [(end, converted, unconverted)], sign)
            for end, parts in left.items() for bucket, converted, unconverted, sign in parts]


def _entry_periods(key: str) -> list[tuple[int, int]]:
    """(arrival number, period end) of each period a pending entry's key names."""
    if key[0] in "cn":
        number, ends = key[1:].split(":")
        return [(int(number), int(end)) for end in ends.split(",")]
    end, number = key.split(":")
    return [(int(number), int(end))]
