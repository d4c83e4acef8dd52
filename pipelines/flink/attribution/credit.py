"""The data-driven models in the stream, the buckets' half: each bucket keeps the
conversions its journeys closed, by refit period, and credits a period's when the fit
sends the weights fitted for it (fit.py); a period settled again (a correction) is
credited again with the new weights, each credit replacing its earlier version. The work
per conversion is done here, spread over the buckets."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedCoProcessFunction, RuntimeContext
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from pipelines.codec import credit_messages, table_messages
from pipelines.flink.attribution.revisions import OrderRevisions
from pipelines.flink.attribution.support import (
    FITTED_WEIGHTS,
    PICKLE_PROTOCOL,
    collect_garbage_rarely,
    put_all,
)
from udfs.attribution import (
    FittedModels,
    merged_period,
    period_runs,
    periods_credit_rows,
    runs_periods,
)
from udfs.journeys import ConvertedJourneys, settle_step_ms
from udfs.orders import OrderRevision

FINAL = 2**63 - 1
Parts = list[tuple[ConvertedJourneys, int]]  # a period's journeys: added (1), retracted (-1)
PlainWeights = tuple[list[Any], Any, dict[str, Any]]


class CreditDataDriven(KeyedCoProcessFunction):  # type: ignore[misc]
    """Per bucket: the converted journeys of each refit period (input 1, CLOSED_JOURNEYS
    from the journeys), credited when the period's fitted weights come (input 2, from the
    fit: every period one settling settled, in one message).

    The fit counts a bucket's message only after the bucket sent its journeys here (each
    message numbered), so weights that name a number not yet received wait for it; the
    two inputs need no watermark between them, and weights that come after the end of the
    input are applied as they come. Each journeys message is stored as it came (one
    entry, keyed "<n|c><number>:<its periods' ends>"), the periods credited of it noted
    beside it; with a correction horizon, the credited periods' journeys are kept (one
    entry "s<...>:<ends>" per crediting, runs of one table) until the watermark is past
    the horizon, to be credited again. Changes to orders (input 1, kind "r", from the
    journeys) write the rows of the orders credited here again (revisions.py)."""

    def __init__(self, horizon_ms: int = 0, process_mode: bool = False,
                 revisions_ms: int = 0) -> None:
        self.horizon_ms = horizon_ms
        self.process_mode = process_mode
        self.revisions_ms = revisions_ms  # with an orders change stream (revisions.py)

    def open(self, runtime_context: RuntimeContext) -> None:
        collect_garbage_rarely()
        self.entries = runtime_context.get_map_state(
            MapStateDescriptor("closed-conversions", Types.STRING(),
                               Types.PICKLED_BYTE_ARRAY()))
        self.taken = runtime_context.get_map_state(
            MapStateDescriptor("credited-periods", Types.STRING(), Types.PICKLED_BYTE_ARRAY()))
        self.received = runtime_context.get_state(
            ValueStateDescriptor("last-received", Types.LONG()))
        self.early = runtime_context.get_list_state(
            ListStateDescriptor("weights-waiting", Types.PICKLED_BYTE_ARRAY()))
        self.index: dict[int, dict[int, list[str]]] = {}  # bucket -> period end -> keys
        self.decoded: dict[tuple[int, str], dict[int, Parts]] = {}
        self.revisions = OrderRevisions(runtime_context, self.revisions_ms,
                                        self.process_mode)

    def _index(self, bucket: int) -> dict[int, list[str]]:
        """The bucket's entries by period end, the periods credited of them left out
        (from the stored keys once per bucket after a (re)start)."""
        index = self.index.get(bucket)
        if index is None:
            index = self.index[bucket] = {}
            for key in sorted(self.entries.keys(), key=_order):  # noqa: SIM118
                taken = set(self.taken.get(key) or ())
                for end in _ends(key):
                    if end not in taken:
                        index.setdefault(end, []).append(key)
        return index

    def process_element1(self, message: tuple[int, int, str, list[int], bytes],
                         ctx: KeyedCoProcessFunction.Context) -> Iterator[Any]:
        bucket, seq, kind, ends, payload = message
        if kind == "r":  # orders changed: their rows again, with the revenue they have now
            revisions = [OrderRevision(*revision) for revision in pickle.loads(payload)]
            yield from _keyed(bucket, self.revisions.revise(revisions)[1])
            return
        key = f"{kind}{seq}:{','.join(map(str, ends))}"
        index = self._index(bucket)  # (from the stored keys before this one is stored)
        put_all(self.entries, {key: payload}, self.process_mode)
        for end in ends:
            index.setdefault(end, []).append(key)
        self.received.update(seq)
        early = self._early()
        if early:  # weights that waited for this message
            self.early.update([weights for weights in early if weights[2] > seq])
            for weights in early:
                if weights[2] <= seq:
                    yield from self._credit(bucket, weights[3], [
                        (end, fitted_weights(plain)) for end, plain in weights[4]])

    def process_element2(self, message: tuple[Any, ...],
                         ctx: KeyedCoProcessFunction.Context) -> Iterator[Any]:
        bucket, kind = message[:2]
        if kind != FITTED_WEIGHTS:  # journeys an earlier version of the fit kept
            # pending or settled there, they are part of the period's next crediting
            _, _, end, sign, journeys = message
            self._keep(bucket, [(end, journeys, sign)],
                       f"k{end}.{sign}.{len(self._index(bucket).get(end, []))}")
            return
        _, _, seen, watermark, periods = message
        if seen > (self.received.value() or 0) or self._early():
            # in order, after those already waiting; in plain form (no class of ours in
            # the state: udfs/pickle_paths.py)
            self.early.add((bucket, kind, seen, watermark,
                            [(end, plain_weights(fitted)) for end, fitted in periods]))
            return
        yield from self._credit(bucket, watermark, periods)

    def _early(self) -> list[tuple[Any, ...]]:
        """The weights waiting for their journeys (PyFlink's list state gives a generator,
        or None when empty, by mode)."""
        return list(self.early.get() or [])

    def _keep(self, bucket: int, periods: list[tuple[int, ConvertedJourneys, int]],
              name: str) -> None:
        """Journeys of some periods, added (sign 1) or retracted (-1), as one entry."""
        index = self._index(bucket)
        ends = [end for end, _, _ in periods]
        key = f"{name}:{','.join(map(str, ends))}"
        stored = [(journeys, sign) for _, journeys, sign in periods]
        self.entries.put(key, pickle.dumps((ends, stored), PICKLE_PROTOCOL))
        for end in ends:
            index.setdefault(end, []).append(key)

    def _credit(self, bucket: int, watermark: int,
                periods: list[tuple[int, FittedModels]]) -> Iterator[bytes]:
        taken = self._take(bucket, [end for end, _ in periods])
        credited: list[tuple[int, ConvertedJourneys, FittedModels]] = []
        for end, fitted in periods:
            parts = taken.get(end, [])
            converted = parts[0][0] if len(parts) == 1 and parts[0][1] > 0 else \
                merged_period([(journeys, {}, sign) for journeys, sign in parts])[0]
            if len(converted):
                credited.append((end, converted, fitted))
        rows = periods_credit_rows([(converted, fitted) for _, converted, fitted in credited])
        if self.revisions.active:  # each order with the revenue it has now
            rows = self.revisions.reported([], rows)[1]
            if watermark < FINAL:
                self.revisions.expire(bucket, watermark)
        yield from _keyed(bucket, rows)
        if self.horizon_ms and credited:  # kept to be credited again, should a correction come
            runs = period_runs([(end, converted, {}) for end, converted, _ in credited])
            key = f"s{credited[0][0]}.{watermark}:{','.join(map(str, runs[0]))}"
            self.entries.put(key, pickle.dumps(runs, PICKLE_PROTOCOL))  # one table for all
            index = self._index(bucket)
            for end in runs[0]:
                index.setdefault(end, []).append(key)
        self._drop_final(bucket, min(periods[0][0], watermark))

    def _take(self, bucket: int, ends: list[int]) -> dict[int, Parts]:
        """The periods' journeys, out of the entries that hold them."""
        index = self._index(bucket)
        parts: dict[int, Parts] = {}
        taken: dict[str, list[int]] = {}
        for end in ends:
            for key in index.pop(end, []):
                decoded = self.decoded.get((bucket, key))
                if decoded is None:
                    decoded = self.decoded[(bucket, key)] = _periods(key, pickle.loads(
                        self.entries.get(key)))
                parts.setdefault(end, []).extend(decoded.pop(end, []))
                taken.setdefault(key, []).append(end)
        for key, ends_taken in taken.items():
            done = [*(self.taken.get(key) or ()), *ends_taken]
            if len(done) >= len(_ends(key)):  # every period of it credited
                self.entries.remove(key)
                self.taken.remove(key)
                del self.decoded[(bucket, key)]
            else:
                self.taken.put(key, done)
        return parts

    def _drop_final(self, bucket: int, before: int) -> None:
        """Periods older than a correction can reach (the horizon, and the step settled
        journeys trail by, behind the fit's watermark) will not be credited again; only
        those before the periods just credited are dropped (one settling of the fit sends
        the weights of many periods, in period order, with its watermark)."""
        if before >= FINAL:
            return  # journeys after the end of the input may settle a period again
        final = before - self.horizon_ms - 2 * settle_step_ms(self.horizon_ms)
        old = [end for end in self._index(bucket) if end < final]
        if old:
            waiting = {end for weights in self._early() for end, _ in weights[4]}
            self._take(bucket, [end for end in old if end not in waiting])


def _keyed(bucket: int, rows: list[Any]) -> Iterator[bytes]:
    for message in credit_messages.encode_chunks_bytes(rows):
        yield table_messages.keyed((bucket,), message)


def plain_weights(fitted: FittedModels) -> PlainWeights:
    """Fitted weights as plain values: (paths in row order, offsets, weights by model)."""
    return list(fitted.rows), fitted.offsets, dict(fitted.weights)


def fitted_weights(plain: PlainWeights) -> FittedModels:
    paths, offsets, weights = plain
    return FittedModels({path: row for row, path in enumerate(paths)}, offsets, weights)


def _ends(key: str) -> list[int]:
    return [int(end) for end in key.split(":")[-1].split(",")]


def _order(key: str) -> tuple[int, str]:
    """Entries in the order they came: messages by number, the others first."""
    if key[0] in "nc":
        return int(key[1:].split(":")[0]), key
    return -1, key


def _periods(key: str, stored: Any) -> dict[int, Parts]:
    """A stored entry's journeys by period: a step's runs ("n"), the runs of periods
    credited here ("s"), a correction's (retracted, added) periods ("c"), or journeys
    an earlier version of the fit kept ("k": (ends, [(journeys, sign)]))."""
    out: dict[int, Parts] = {}
    if key[0] in "ns":
        for end, journeys, _ in runs_periods(stored):
            out.setdefault(end, []).append((journeys, 1))
        return out
    if key[0] == "c":
        retracted, added = stored
        for periods, sign in ((retracted, -1), (added, 1)):
            for end, journeys, _ in periods:
                out.setdefault(end, []).append((journeys, sign))
        return out
    ends, parts = stored
    for end, part in zip(ends, parts, strict=True):
        out.setdefault(end, []).append(part)
    return out

