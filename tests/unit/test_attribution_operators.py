"""The attribution job's operators (decode -> journeys by bucket -> data-driven fit) driven
in one process the way Flink drives them (tests.flink_fakes): keyed state in pickling
stand-ins, event-time timers fired as the watermark passes them, a checkpoint a deep copy
of every key's state.
Their credits must be the batch reference's, with a restore anywhere in the stream and
from state an earlier version stored."""

from __future__ import annotations

import base64
import json
import math
import pickle
import random
from typing import Any

import numpy as np
import pytest

from pipelines.codec import credit_messages
from pipelines.codec.events import decode_events
from pipelines.codec.frame import NO_TIME, frame, group_frames, newest_start_ms
from pipelines.codec.journey_wire import events_to_wire, state_to_wire
from pipelines.codec.otlp import decode_spans
from pipelines.flink.attribution.decode import DecodeOtlp
from pipelines.flink.attribution.support import (
    ACCOUNTING,
    COUNTS,
    DEAD_LETTERS,
    LATE_EVENTS,
    ORDERS,
    WITHDRAWN,
)
from pipelines.sources.expected import late_beyond
from pipelines.sources.generator import Plan, PlannedEvent, emit, plan_events
from pipelines.sources.kafka_exporter import CollectingProducer, KafkaSpanExporter
from pipelines.sources.landing_form import TOUCH_FORMS, landing_attributes
from schemas.events import EMPTY, EventColumns, records_of, unpack
from schemas.records import Touchpoint
from tests.flink_fakes import FakeContext, KeyState, Named, Timers
from tests.operator_job import (
    BUCKETS,
    DATA_DRIVEN,
    PER_CONVERSION,
    REFIT_MS,
    Job,
    finish,
    keyed,
    run,
)
from tests.reference import reference_credits, reference_journeys
from tests.spans import stamp_of, stamped
from udfs.journeys.book import JourneyBook, bucket_of
from udfs.journeys.rules import JourneyConfig, JourneyState


@pytest.fixture(scope="module")
def stream() -> tuple[Any, list[bytes]]:
    plan = plan_events(300, seed=21)
    sink = CollectingProducer()
    emit(plan, KafkaSpanExporter("unused:0", producer=sink), sink.append, batch_size=16)
    return plan, stamped(sink)


@pytest.mark.parametrize("correction_days", [JourneyConfig().correction_days, 30.0])
def test_the_operators_give_the_batch_reference_credits(stream, correction_days):
    """The default horizon, and one that splits the touches the plan holds back to the
    end (up to 45 days behind): those within it correct, the rest are late."""
    plan, messages = stream
    journey = JourneyConfig(correction_days=correction_days)
    job = finish(run(Job(journey=journey), messages))
    horizon = journey.correction_ms
    expected = keyed([c._asdict() for c in reference_credits(
        plan, PER_CONVERSION + DATA_DRIVEN, REFIT_MS / 1000, correction_ms=horizon)])
    got = keyed(job.credits)
    assert len(got) == len(job.credits)  # nothing credited twice
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
    # of the touches held back to the end, those within the horizon corrected; the rest late
    late_ones = late_beyond(plan, horizon)
    assert 0 < late_ones <= plan.late_count
    assert late_ones < plan.late_count or correction_days < 30
    assert job.conversions > 0 and job.late == late_ones
    messages_, records_in, used, other, dead, late, gpu_calls, tracing, _, expired = job.counts
    assert (messages_, dead, late, expired) == (len(messages), job.dead, late_ones, 0)
    assert records_in == used + other + dead
    assert other == gpu_calls + tracing and gpu_calls > 0 and tracing > 0
    assert {c["stage"] for c in job.credits} >= {"new", "repeat"}
    assert len({c["order_id"] for c in job.credits}) == len(reference_journeys(
        plan, correction_ms=horizon))


@pytest.mark.parametrize("group", [3, 17, 1000])
def test_records_grouped_by_the_source_give_the_credits_of_one_at_a_time(stream, group):
    """FrameBatches groups consecutive records (a watermark only between groups): one batch
    per bucket per group reaches the journeys, and the credits, late events and counts are
    those of the records taken one at a time."""
    _, messages = stream
    single = finish(run(Job(), messages))
    grouped = finish(run(Job(), messages, group))
    assert keyed(grouped.credits) == keyed(single.credits)
    assert (grouped.late, grouped.dead, grouped.counts) == (single.late, single.dead,
                                                            single.counts)
    groups = -(-len(messages) // group)
    assert grouped.batches <= groups * BUCKETS < single.batches


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.85])
def test_a_restore_from_a_checkpoint_gives_the_credits_of_an_uninterrupted_run(stream, cut):
    _, messages = stream
    whole = finish(run(Job(), messages)).credits
    at = int(len(messages) * cut)
    first = run(Job(), messages[:at])
    # what was emitted after the checkpoint is lost with the failed run (a transactional
    # sink never commits it): the restored run emits it again
    rest = finish(run(Job(first.checkpoint()), messages[at:]))
    both = first.credit_messages + rest.credit_messages
    assert keyed(credit_messages.latest(both)) == keyed(whole)
    assert len(both) == len(finish(run(Job(), messages)).credit_messages)


def test_journey_state_an_earlier_version_stored_is_read_and_moved(stream):
    """A checkpoint whose journey state is in the earlier form (one entry per user, events
    as tuples) restores to the same credits, and leaves only the new form behind. (That
    form kept no events behind its watermark: what comes behind it after the upgrade is
    late, so both runs here are without a correction horizon.)"""
    _, messages = stream
    journey = JourneyConfig(correction_days=0)
    whole = finish(run(Job(journey=journey), messages)).credits
    at = len(messages) // 2
    first = run(Job(journey=journey), messages[:at])
    state = first.checkpoint()
    for bucket, backend in state["store"].by_key.items():
        legacy_form(backend, first.attribute.books[bucket].live)
    rest = finish(run(Job(state, journey), messages[at:]))
    assert keyed(credit_messages.latest(first.credit_messages + rest.credit_messages)) \
        == keyed(whole)
    for backend in rest.store.by_key.values():
        assert backend.get_state(Named("progress")).value() is None
        assert backend.get_map_state(Named("users")).stored == {}
        assert backend.get_state(Named("book-progress")).value() is not None


def legacy_form(backend: KeyState, book: JourneyBook) -> None:
    """Rewrites one key's journey state as an earlier version kept it."""
    snapshot = book.snapshot()
    channels, campaigns = snapshot.channels, snapshot.campaigns
    users = backend.get_map_state(Named("users"))
    at = 0
    for user, last, count in zip(snapshot.users, snapshot.last_order.tolist(),
                                 snapshot.touch_counts.tolist(), strict=True):
        touches = [(user, ts, channels[ch], campaigns[ca], trace, "") for ts, ch, ca, trace
                   in zip(snapshot.touch_ts[at:at + count].tolist(),
                          snapshot.touch_channel[at:at + count].tolist(),
                          snapshot.touch_campaign[at:at + count].tolist(),
                          snapshot.touch_trace[at:at + count].tolist(), strict=True)]
        at += count
        state = JourneyState([Touchpoint(*t) for t in touches],
                             None if last == -2**63 else last)
        users.put_all({user: state_to_wire(state)})
    batches = backend.get_map_state(Named("waiting-batches"))
    batches.put_all({key: pickle.dumps(events_to_wire(records_of(events)))
                     for key, events in book.batches.items()})
    backend.get_state(Named("progress")).update((book.watermark, ()))
    for name in ("book-snapshot", "book-batches", "book-progress"):
        backend.states.pop(name, None)


def test_a_restore_under_another_bucket_count_is_refused_with_the_reason(stream):
    _, messages = stream
    first = run(Job(), messages[:40])
    restored = Job(first.checkpoint())
    restored.attribute.buckets = 2 * BUCKETS
    with pytest.raises(ValueError, match=r"flink.user_buckets: 4, the config says 8"):
        run(restored, messages[40:])


def _messages(events: list[PlannedEvent]) -> list[bytes]:
    sink = CollectingProducer()
    emit(Plan(events=events), KafkaSpanExporter("unused:0", producer=sink), sink.append,
         batch_size=len(events))
    return stamped(sink)


def test_an_order_sent_again_is_credited_once():
    """The same order in another message, in a later batch, twice in one message, and
    after a restore from a checkpoint: one set of credits, every copy a dead letter."""
    t0 = 1_790_000_000 * 10**9
    minute = 60 * 10**9
    users = [PlannedEvent("touchpoint", f"u{i}", t0 + i * minute, "email", "spring")
             for i in range(10)]
    orders = [PlannedEvent("conversion", f"u{i}", t0 + i * minute + minute // 2,
                           order_id=f"o{i}", revenue=10.0 + i) for i in range(10)]
    plan = Plan(events=[e for pair in zip(users, orders, strict=True) for e in pair])
    stream: list[list[bytes]] = []
    for i in range(10):
        stream.append(_messages([users[i], orders[i]] + ([orders[i]] if i == 8 else [])))
        if i in (1, 3):
            stream.append(_messages([orders[i]]))  # the next message
        if i == 5:
            stream.append(_messages([orders[3]]))  # a later batch, within the lateness
    copies = 1 + 1 + 1 + 1 + 1  # o1, o3 twice, o8 in its own message, o5 after the restore
    first = Job()
    for group in stream[:8]:
        for message in group:
            first.feed(message)
    restored = Job(first.checkpoint())
    for message in _messages([orders[5]]):  # after the restart
        restored.feed(message)
    for group in stream[8:]:
        for message in group:
            restored.feed(message)
    finish(restored)
    expected = keyed([c._asdict() for c in reference_credits(plan, PER_CONVERSION, REFIT_MS
                                                             / 1000)
                      if c.model in PER_CONVERSION])
    got = keyed([c for c in credit_messages.latest(first.credit_messages
                                                    + restored.credit_messages)
                 if c["model"] in PER_CONVERSION])
    assert got == expected
    duplicates = first.duplicates + restored.duplicates
    assert len(duplicates) == copies
    assert sorted(json.loads(base64.b64decode(d["payload_base64"]))["order_id"]
                  for d in duplicates) == ["o1", "o3", "o3", "o5", "o8"]
    assert {d["reason"] for d in duplicates} == {"duplicate_order"}
    counts = dict(zip(COUNTS, [a + b for a, b in zip(first.counts, restored.counts,
                                                       strict=True)], strict=True))
    assert counts["duplicate_orders"] == copies
    # a duplicate is used, dead-lettered and not processed (flink_job.accounting_json)
    processed = counts["used"] - counts["late"] - counts["duplicate_orders"]
    assert counts["records_in"] == processed + counts["dead_lettered"] + counts["late"] \
        + counts["other"]


@pytest.mark.parametrize("reverse", [False, True])
def test_one_order_id_from_users_in_every_bucket_is_credited_once_to_its_earliest_copy(
        reverse):
    """Copies of one order id sent by users in different user buckets meet in the
    duplicate check (keyed by order id): one conversion, credited to the earliest copy's
    user whatever the order the copies arrive in; every other copy a dead letter."""
    t0 = 1_790_000_000 * 10**9
    second = 10**9
    users = [f"user-{n}" for n in range(40)]
    by_bucket: dict[int, str] = {}
    for user in users:
        by_bucket.setdefault(bucket_of(user, BUCKETS), user)
    assert len(by_bucket) == BUCKETS
    chosen = [by_bucket[b] for b in sorted(by_bucket)]
    events = []
    for n, user in enumerate(chosen):
        events.append(PlannedEvent("touchpoint", user, t0 + n * second, "email", "weekly"))
        events.append(PlannedEvent("conversion", user, t0 + (30 + n) * second,
                                   order_id="dup-1", revenue=50.0))
    messages = [m for pair in zip(events[::2], events[1::2], strict=True)
                for m in _messages(list(pair))]
    job = finish(run(Job(), messages[::-1] if reverse else messages))
    last_click = [c for c in job.credits if c["model"] == "last_click"]
    assert [(c["order_id"], c["user_id"]) for c in last_click] == [("dup-1", chosen[0])]
    assert job.conversions == 1 and len(job.duplicates) == BUCKETS - 1
    copies = sorted(json.loads(base64.b64decode(d["payload_base64"]))["user_id"]
                    for d in job.duplicates)
    assert copies == sorted(chosen[1:])
    # each names the record it came in (the harness reads partition 0, offsets from 0)
    assert all(d["partition"] == 0 and 0 <= d["offset"] < len(messages)
               for d in job.duplicates)


def test_a_withdrawal_that_comes_before_its_order_still_takes_it_out():
    """The check's withdrawal and the order's own batch travel different paths: a
    withdrawal that reaches the journeys first waits for the copy and takes it out, so the
    copy is never credited; after a restore too."""
    t0 = 1_790_000_000 * 10**9
    second = 10**9
    events = [PlannedEvent("touchpoint", "early", t0, "email", "weekly"),
              PlannedEvent("conversion", "early", t0 + 30 * second, order_id="o-1",
                           revenue=20.0),
              PlannedEvent("touchpoint", "late", t0 + 40 * second, "display", "retarget"),
              PlannedEvent("conversion", "late", t0 + 60 * second, order_id="o-1",
                           revenue=20.0)]
    messages = _messages(events)
    probe = Job()
    rows = [row for message in messages
            for out in probe.decode.process_element(frame(message, 0, 0, 0, newest_start_ms(
                message, 2**62), NO_TIME), FakeContext(Timers()))
            if out[0] is ORDERS for row in out[1][2]]
    (copy_row,) = [row[:7] for row in rows if row[0] == "late"]  # without its place
    job = Job()
    bucket = bucket_of("late", BUCKETS)
    job._collect(job.attributing.process(
        (bucket, WITHDRAWN, pickle.dumps([copy_row])), key=bucket))
    job = Job(job.checkpoint())  # the waiting withdrawal is kept in state
    job.deduping.process = lambda *_, **__: []  # type: ignore[method-assign]  # only it
    finish(run(job, messages))
    credited = {(c["order_id"], c["user_id"]) for c in job.credits}
    assert credited == {("o-1", "early")}


def _interleaved(messages: list[bytes], partitions: int, seed: int | None
                 ) -> list[tuple[int, bytes]]:
    """The messages spread over partitions without keys (round robin: a user's events in
    several), read one partition after another (seed None: a catch-up where each
    partition's reader finishes before the next starts) or at random speeds."""
    queues = [[(p, m) for m in messages[p::partitions]] for p in range(partitions)]
    if seed is None:
        return [item for queue in queues for item in queue]
    rng = random.Random(seed)
    out: list[tuple[int, bytes]] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        taken = rng.randint(1, 40)
        out.extend(queue[:taken])
        del queue[:taken]
    return out


@pytest.mark.parametrize(("partitions", "seed", "restart"),
                         [(4, None, False), (8, 3, True), (4, 11, True)])
def test_partitions_read_at_any_pace_give_the_batch_credits(stream, partitions, seed,
                                                            restart):
    """Unkeyed partitions read at different paces while the watermark follows the fastest
    (the others count as idle): most events reach their journeys behind the watermark
    and correct what they change. Once the input ends, the credits that hold (each
    conversion's latest under each model) are the batch reference's over every event,
    row for row, the data-driven models included; nothing is late; after a restore
    from a checkpoint mid-way too."""
    plan, messages = stream
    journey = JourneyConfig(correction_days=60)  # more than the plan's 45 days
    order = _interleaved(messages, partitions, seed)
    job = Job(journey=journey)
    cut = len(order) // 2 if restart else len(order)
    for partition, message in order[:cut]:
        job.feed(message, partition)
    emitted = list(job.credit_messages)
    if restart:
        newest = dict(job.newest_of)  # the source reads its partitions' newest again
        job = Job(job.checkpoint(), journey)
        job.newest_of = newest
        for partition, message in order[cut:]:
            job.feed(message, partition)
    finish(job)
    got = keyed(credit_messages.latest(emitted + job.credit_messages if restart
                                       else job.credit_messages))
    expected = keyed([c._asdict() for c in reference_credits(
        plan, PER_CONVERSION + DATA_DRIVEN, REFIT_MS / 1000,
        correction_ms=journey.correction_ms)])
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[k], expected[k], rel_tol=1e-9) for k in expected)
    assert job.late == 0


def test_an_order_behind_the_watermark_is_credited_once_admitted_and_a_late_copy_is_not():
    """Orders that reach the decoder behind the watermark go to their journeys only
    through the duplicate check: a new one is admitted and corrects its journey
    (credited); a copy of an order credited before, from another user, is a dead letter
    and changes nothing."""
    t0 = 1_790_000_000 * 10**9
    minute = 60 * 10**9
    on_time = [PlannedEvent("touchpoint", "ann", t0, "email", "weekly"),
               PlannedEvent("conversion", "ann", t0 + minute, order_id="o-1", revenue=20.0),
               PlannedEvent("touchpoint", "bob", t0 + 2 * minute, "display", "retarget"),
               PlannedEvent("touchpoint", "cy", t0 + 3 * minute, "search", "brand"),
               PlannedEvent("touchpoint", "dee", t0 + 60 * minute, "search", "brand")]
    behind = [PlannedEvent("conversion", "bob", t0 + 4 * minute, order_id="o-1",
                           revenue=20.0),  # a copy of ann's order
              PlannedEvent("conversion", "cy", t0 + 5 * minute, order_id="o-2",
                           revenue=7.0)]
    job = Job()
    for message in _messages(on_time):
        job.feed(message)
    assert job.timers.watermark > (t0 + 5 * minute) // 10**6  # both come behind it
    for message in _messages(behind):
        job.feed(message)
    finish(job)
    credited = {(c["order_id"], c["user_id"], c["channel"]) for c in job.credits
                if c["model"] == "last_click"}
    assert credited == {("o-1", "ann", "email"), ("o-2", "cy", "search")}
    assert [json.loads(base64.b64decode(d["payload_base64"]))["user_id"]
            for d in job.duplicates] == ["bob"]
    assert job.late == 0


def test_touches_behind_the_watermark_go_to_their_journeys_as_the_scanner_packed_them():
    """Only an order behind the decoder's watermark is held for the duplicate check; a
    message whose touches alone are behind it keeps the scanner's packed batches: the
    same events, per bucket, as with no watermark at all, and its order is not held."""
    t0 = 1_790_000_000 * 10**9
    minute = 60 * 10**9
    events = [PlannedEvent("touchpoint", f"user-{n}", t0 + n * minute, "email", "weekly")
              for n in range(6)]
    events.append(PlannedEvent("conversion", "user-2", t0 + 30 * minute, order_id="o-9",
                               revenue=9.0))
    framed = group_frames([frame(message, 0, offset, stamp_of(message) or 0,
                                 newest_start_ms(message, 2**62), NO_TIME)
                           for offset, message in enumerate(_messages(events))])

    def decoded(watermark: int) -> tuple[dict[int, list], list]:
        timers = Timers()
        timers.watermark = watermark
        out = list(DecodeOtlp("auto", "spans", 4).process_element(framed, FakeContext(timers)))
        batches = {o[0]: records_of(unpack(o[2])) for o in out if isinstance(o[0], int)}
        orders = [o[1] for o in out if o[0] is ORDERS]
        return batches, orders

    free, free_orders = decoded(-(2**62))
    behind, behind_orders = decoded((t0 + 10 * minute) // 10**6)  # after every touch
    assert behind == free and sum(map(len, free.values())) == len(events)
    assert [(held, len(rows)) for _, held, rows in behind_orders] == [(0, 1)]
    assert behind_orders == free_orders
    _, held_orders = decoded((t0 + 40 * minute) // 10**6)  # after the order too
    assert [(held, len(rows)) for _, held, rows in held_orders] == [(1, 1)]


def _decoder_outputs(decoder: DecodeOtlp, elements: list[bytes], watermark: int,
                     grouped: bool) -> tuple:
    """What the decoder sends for these framed records, in one call or one call each,
    comparable: each bucket's events in order, each order bucket's rows, the other
    outputs in order, the counts summed."""
    timers = Timers()
    timers.watermark = watermark
    calls = [group_frames(elements)] if grouped else elements
    batches: dict[int, list] = {}
    orders: dict[tuple, list] = {}
    items, counts = [], [0] * len(COUNTS)
    for call in calls:
        for out in decoder.process_element(call, FakeContext(timers)):
            if out[0] is ACCOUNTING:
                counts = [a + b for a, b in zip(counts, out[1], strict=True)]
            elif out[0] is ORDERS:
                key, held, rows = out[1]
                orders.setdefault((key, held), []).extend(rows)
            elif isinstance(out[0], int):  # each kind in order (a batch: touches, orders)
                touches, orders_ = unpack(out[2])
                kinds = batches.setdefault(out[0], [[], []])
                kinds[0] += records_of(EventColumns(touches, EMPTY.orders))
                kinds[1] += records_of(EventColumns(EMPTY.touches, orders_))
            else:
                items.append(out)
    return batches, orders, items, counts


def test_a_group_scanned_at_once_gives_what_its_records_give_one_by_one(stream):
    """Plain messages of a group are scanned together (one batch per bucket and run of
    them); messages the scanner leaves aside (malformed spans, late by arrival, an order
    behind the watermark, a null value, an unreadable record) go their own way in between:
    every bucket's events, every order and every count as when each record came alone."""
    plan, messages = stream
    t0 = min(e.ts_ns for e in plan.events if e.kind in ("touchpoint", "conversion"))
    elements = []
    for offset, message in enumerate(messages[:60]):
        stamp = stamp_of(message) or 0
        if offset % 7 == 3:  # arrived long after: its events are late by arrival
            stamp += 90 * 86_400_000
        elif offset % 7 == 5:  # arrived a day after its middle event: some of it late
            ts = np.sort(decode_events(message, 8).touches.ts_ms)
            stamp = int(ts[len(ts) // 2]) + 86_400_000 if len(ts) else stamp
        elements.append(frame(message, offset % 3, offset, stamp,
                              newest_start_ms(message, 2**62), NO_TIME))
    elements.insert(10, frame(None, 0, 999, 0, NO_TIME, NO_TIME))
    elements.insert(20, b"\x01 not a framed record")
    watermark = t0 // 10**6 + 5 * 86_400_000  # some orders behind it
    decoder = DecodeOtlp("auto", "spans", 8, correction_ms=86_400_000)
    grouped = _decoder_outputs(decoder, elements, watermark, grouped=True)
    single = _decoder_outputs(decoder, elements, watermark, grouped=False)
    assert grouped == single
    batches, orders, items, counts = grouped
    assert len(batches) == 8 and any(held for _, held in orders)
    assert {out[0] for out in items} == {DEAD_LETTERS, LATE_EVENTS}
    assert counts[COUNTS.index("records_in")] > 0
    assert counts[COUNTS.index("late")] == sum(out[0] is LATE_EVENTS for out in items)


def test_a_group_the_scanner_fails_on_is_decoded_record_by_record(stream, monkeypatch):
    """An error of the group scan does not stop the decoder: each record on its own."""
    import pipelines.flink.attribution.decode as decode_module

    _, messages = stream
    elements = [frame(message, 0, offset, stamp_of(message) or 0,
                      newest_start_ms(message, 2**62), NO_TIME)
                for offset, message in enumerate(messages[:20])]
    decoder = DecodeOtlp("auto", "spans", 4)
    expected = _decoder_outputs(decoder, elements, -(2**62), grouped=False)

    def broken(*args: Any) -> None:
        raise MemoryError("no room for the group")

    monkeypatch.setattr(decode_module, "scan_group", broken)
    assert _decoder_outputs(decoder, elements, -(2**62), grouped=True) == expected


def test_spans_for_the_general_rules_keep_a_message_in_the_group_scan(monkeypatch):
    """The group scan leaves a message's spans for the general rules out and decodes just
    them: dead letters and plain tracing keep the message in the scanned run; a span that
    is a touch or an order after all sends the message its own way, the group scanned
    again without it. Either way, what the records give one by one."""
    import pipelines.flink.attribution.decode as decode_module
    from tests.otlp_payloads import random_payloads

    seen = {"general": 0, "whole": 0}
    left_out = decode_module.DecodeOtlp._left_out

    def counting(self: DecodeOtlp, records: list, found: Any) -> tuple:
        extras, whole = left_out(self, records, found)
        seen["general"] += sum(1 for m in found.messages if m is not None and m.general)
        seen["whole"] += len(whole)
        return extras, whole

    monkeypatch.setattr(decode_module.DecodeOtlp, "_left_out", counting)
    elements = [frame(payload, 0, offset, 0, newest_start_ms(payload, 2**62), NO_TIME)
                for offset, payload in enumerate(random_payloads(13, 80))]
    decoder = DecodeOtlp("auto", "spans", 8)
    grouped = _decoder_outputs(decoder, elements, -(2**62), grouped=True)
    single = _decoder_outputs(decoder, elements, -(2**62), grouped=False)
    assert grouped == single
    assert seen["general"] > 5 and seen["whole"] > 0, seen
    assert grouped[3][COUNTS.index("dead_lettered")] > 0


def test_a_sample_as_plain_http_landings_gets_the_credits_of_its_explicit_attributes():
    """The sample shop's touches given as plain HTTP landings (UTM parameters, a referrer:
    pipelines/sources/landing_form.py) get the credits, conversions and counts of the same
    touches given as explicit `marketing.*` attributes."""
    def sample(touches: str) -> list[bytes]:
        sink = CollectingProducer()
        emit(plan_events(300, seed=21), KafkaSpanExporter("unused:0", producer=sink),
             sink.append, batch_size=16, touches=touches)
        return stamped(sink)

    explicit, http = (sample(touches) for touches in TOUCH_FORMS)
    assert len(explicit) == len(http) and explicit != http
    assert b"marketing.channel" not in b"".join(http)
    touches = [r for message in http for r in decode_spans(message).records
               if isinstance(r, Touchpoint)]
    assert {t.channel for t in touches} == {"paid_search", "paid_social", "display", "email",
                                            "affiliate", "organic_search"}
    by_attributes, by_landings = finish(run(Job(), explicit)), finish(run(Job(), http))
    assert len(by_attributes.credits) > 500
    assert by_landings.credits == by_attributes.credits
    assert by_landings.counts == by_attributes.counts
    assert by_landings.conversions == by_attributes.conversions


def test_a_channel_without_a_landing_form_is_refused() -> None:
    with pytest.raises(ValueError, match="no landing form for channel 'tv'"):
        landing_attributes("u1", "tv", "")
