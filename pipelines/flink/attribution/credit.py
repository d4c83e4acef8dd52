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
from pipelines.flink.attribution.support import (
    FITTED_WEIGHTS,
    PICKLE_PROTOCOL,
    collect_garbage_rarely,
    put_all,
)
from udfs.attribution import FittedModels, merged_period, runs_periods
from udfs.journeys import ConvertedJourneys, settle_step_ms

FINAL = 2**63 - 1
Parts = list[tuple[ConvertedJourneys, int]]  # a period's journeys: added (1), retracted (-1)


class CreditDataDriven(KeyedCoProcessFunction):  # type: ignore[misc]
    """Per bucket: the converted journeys of each refit period (input 1, CLOSED_JOURNEYS
    from the journeys), credited when the period's fitted weights come (input 2, from the
    fit).

    The fit counts a bucket's message only after the bucket sent its journeys here (each
    message numbered), so weights that name a number not yet received wait for it; the
    two inputs need no watermark between them, and weights that come after the end of the
    input are applied as they come. Each message is stored as it came (one entry, keyed
    "<n|c><number>:<its periods' ends>"), the periods credited of it noted beside it;
    with a correction horizon, a credited period's journeys are kept, merged ("m<end>"),
    until the watermark is past the horizon, to be credited again."""

    def __init__(self, horizon_ms: int = 0, process_mode: bool = False) -> None:
        self.horizon_ms = horizon_ms
        self.process_mode = process_mode

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
        key = f"{kind}{seq}:{','.join(map(str, ends))}"
        index = self._index(bucket)  # (from the stored keys before this one is stored)
        put_all(self.entries, {key: payload}, self.process_mode)
        for end in ends:
            index.setdefault(end, []).append(key)
        self.received.update(seq)
        early = self._early()
        if early:  # weights that waited for this message
            ready = [weights for weights in early if weights[3] <= seq]
            self.early.update([weights for weights in early if weights[3] > seq])
            for weights in ready:
                yield from self._credit(bucket, weights[2], weights[4],
                                        fitted_weights(weights[5]))

    def process_element2(self, message: tuple[Any, ...],
                         ctx: KeyedCoProcessFunction.Context) -> Iterator[Any]:
        bucket, kind, end = message[:3]
        if kind != FITTED_WEIGHTS:  # journeys an earlier version of the fit kept
            _, _, _, sign, settled, journeys = message
            self._keep(bucket, end, journeys, sign, settled)
            return
        seen = message[3]
        received = self.received.value() or 0
        if seen > received or self._early():
            # in order, after those already waiting; in plain form (no class of ours in
            # the state: udfs/pickle_paths.py)
            self.early.add((*message[:5], plain_weights(message[5])))
            return
        yield from self._credit(bucket, end, *message[4:])

    def _early(self) -> list[tuple[Any, ...]]:
        """The weights waiting for their journeys (PyFlink's list state gives a generator,
        or None when empty, by mode)."""
        return list(self.early.get() or [])

    def _keep(self, bucket: int, end: int, journeys: ConvertedJourneys, sign: int,
              settled: bool) -> None:
        index = self._index(bucket).setdefault(end, [])
        key = f"m{end}" if settled else f"k{len(index)}.{sign}:{end}"
        self.entries.put(key, pickle.dumps((journeys, sign), PICKLE_PROTOCOL))
        index.append(key)

    def _credit(self, bucket: int, end: int, watermark: int,
                fitted: FittedModels) -> Iterator[bytes]:
        converted, _ = merged_period([(journeys, {}, sign)
                                      for journeys, sign in self._take(bucket, end)])
        if len(converted):
            for message in credit_messages.encode_chunks_bytes(fitted.credit_rows(converted)):
                yield table_messages.keyed((bucket,), message)
            if self.horizon_ms:  # kept to be credited again, should a correction come
                self._keep(bucket, end, converted, 1, True)
        self._drop_final(bucket, min(end, watermark))

    def _take(self, bucket: int, end: int) -> Parts:
        """The period's journeys, out of the entries that hold them."""
        parts: Parts = []
        for key in self._index(bucket).pop(end, []):
            if key[0] in "mk":  # one period's journeys
                journeys, sign = pickle.loads(self.entries.get(key))
                self.entries.remove(key)
                parts.append((journeys, sign))
                continue
            decoded = self.decoded.get((bucket, key))
            if decoded is None:
                decoded = self.decoded[(bucket, key)] = _periods(key, pickle.loads(
                    self.entries.get(key)))
            parts += decoded.pop(end, [])
            taken = [*(self.taken.get(key) or ()), end]
            if len(taken) == len(_ends(key)):  # every period of it credited
                self.entries.remove(key)
                self.taken.remove(key)
                del self.decoded[(bucket, key)]
            else:
                self.taken.put(key, taken)
        return parts

    def _drop_final(self, bucket: int, before: int) -> None:
        """Periods older than a correction can reach (the horizon, and the step settled
        journeys trail by, behind the fit's watermark) will not be credited again; only
        those before the period just credited are dropped (one settling of the fit sends
        the weights of many periods, in period order, with its watermark)."""
        if before >= FINAL:
            return  # journeys after the end of the input may settle a period again
        final = before - self.horizon_ms - 2 * settle_step_ms(self.horizon_ms)
        waiting = {weights[2] for weights in self._early()}
        for end in [end for end in self._index(bucket) if end < final and end not in waiting]:
            self._take(bucket, end)


def plain_weights(fitted: FittedModels) -> tuple[list[Any], Any, dict[str, Any]]:
    """Fitted weights as plain values: (paths in row order, offsets, weights by model)."""
    return list(fitted.rows), fitted.offsets, dict(fitted.weights)


def fitted_weights(plain: tuple[list[Any], Any, dict[str, Any]]) -> FittedModels:
    paths, offsets, weights = plain
    return FittedModels({path: row for row, path in enumerate(paths)}, offsets, weights)


def _ends(key: str) -> list[int]:
    return [int(end) for end in key.split(":")[-1].split(",")] if ":" in key \
        else [int(key[1:])]


def _order(key: str) -> tuple[int, str]:
    """Entries in the order they came: messages by number, the others first."""
    if key[0] in "nc":
        return int(key[1:].split(":")[0]), key
    return -1, key


def _periods(key: str, stored: Any) -> dict[int, Parts]:
    """A stored message's journeys by period: a step's runs, or a correction's
    (retracted, added) periods."""
    out: dict[int, Parts] = {}
    if key[0] == "n":
        for end, journeys, _ in runs_periods(stored):
            out.setdefault(end, []).append((journeys, 1))
        return out
    retracted, added = stored
    for periods, sign in ((retracted, -1), (added, 1)):
        for end, journeys, _ in periods:
            out.setdefault(end, []).append((journeys, sign))
    return out
