"""Two keyed streams connected: each side's records reach one function with the key's
state shared, and the interval join pairs them by time, forgets what can no longer
pair, and routes records too late to pair aside; against both state backends, through
a checkpoint restored at another parallelism."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from keyed_operators import MAX_P, Operators

from job_runtime import Pipeline, sinks, sources, watermarks, windows
from job_runtime.errors import PipelineDefinitionError
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.chain import RecordChain
from job_runtime.pipeline import KeyedOp
from job_runtime.pipeline.connect import KEY, LATE
from job_runtime.records import Batch, key_group_of
from job_runtime.state.backend import BACKEND_KINDS

EVENTS = watermarks.bounded_out_of_orderness("ts", max_delay="1s")


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def two_sources(p: Pipeline, *, event_time: bool = True) -> tuple[Any, Any]:
    strategy = EVENTS if event_time else None
    orders = p.source(sources.sequence(count=1), watermarks=strategy)
    payments = p.source(sources.sequence(count=1), watermarks=strategy)
    return orders, payments


class Wrapped:
    """The pipeline's connected keyed operator, and each side's record functions, as
    the first stage applies them before the exchange."""

    def __init__(self, p: Pipeline) -> None:
        stages = plan_stages(p)
        keyed = stages[-1].keyed
        assert keyed is not None
        self.op: KeyedOp = keyed
        self.sides = [RecordChain(ops=entry.ops, subtask=0) for entry in p.inputs]

    def batch(self, side: int, *records: dict[str, Any], owner: Any = None) -> Batch:
        """The records of ``side`` as they cross the exchange (to ``owner``: only the
        keys whose key groups it owns)."""
        rows = self.sides[side](Batch(rows=list(records))).rows
        return Batch(rows=[row for row in rows if owner is None
                           or key_group_of(row[KEY], MAX_P) in owner.key_groups])


def test_one_function_sees_both_sides_with_the_keys_state_shared(
        operators: Operators) -> None:
    def both(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
        seen = ctx.value_state("seen")
        seen.update(seen.value(0) + 1)
        return [{"key": ctx.key, "side": ctx.input, "seen": seen.value(),
                 "what": record.get("item") or record.get("amount")}]

    p = Pipeline()
    orders, payments = two_sources(p, event_time=False)
    rows = orders.key_by("order").connect(payments.key_by("order_id")).process(both)
    rows.sink(sinks.discard())
    p.validate()
    wrapped = Wrapped(p)
    op = operators.make(wrapped.op)
    out = op.process(wrapped.batch(0, {"order": 7, "item": "book"},
                                   {"order": 8, "item": "pen"}))
    out2 = op.process(wrapped.batch(1, {"order_id": 7, "amount": 12.5}))
    assert [(r["key"], r["side"], r["seen"], r["what"]) for r in out.rows + out2.rows] == [
        (7, 0, 1, "book"), (8, 0, 1, "pen"), (7, 1, 2, 12.5)]


def order(o: int, ts: int) -> dict[str, Any]:
    return {"order": o, "ts": ts, "item": f"item-{o}"}


def payment(o: int, ts: int, amount: float = 1.0) -> dict[str, Any]:
    return {"order_id": o, "ts": ts, "amount": amount}


def joined_pipeline(*, lower: str = "-1s", upper: str = "5s") -> Pipeline:
    p = Pipeline()
    orders, payments = two_sources(p)
    rows = (orders.key_by("order").connect(payments.key_by("order_id"))
            .interval_join(lower=lower, upper=upper,
                           fn=lambda o, pay: {"order": o["order"], "ordered": o["ts"],
                                              "paid": pay["ts"], "amount": pay["amount"]}))
    rows.sink(sinks.discard())
    rows.side_output(LATE).sink(sinks.discard())
    return p


def pairs(batch: Batch) -> list[tuple[int, int, int]]:
    return sorted((r["order"], r["ordered"], r["paid"]) for r in batch.rows)


def test_the_interval_join_pairs_records_whose_times_fit_from_either_side_first(
        operators: Operators) -> None:
    wrapped = Wrapped(joined_pipeline())
    op = operators.make(wrapped.op)
    assert pairs(op.process(wrapped.batch(0, order(1, 10_000), order(2, 10_000)))) == []
    # paid - ordered must lie in [-1 s, +5 s].
    out = op.process(wrapped.batch(1, payment(1, 12_000), payment(1, 16_000),
                                   payment(2, 8_000), payment(3, 10_000)))
    assert pairs(out) == [(1, 10_000, 12_000)]
    # A second order of 1 arrives after its payment: it pairs with both fitting ones.
    assert pairs(op.process(wrapped.batch(0, order(1, 11_500)))) == [
        (1, 11_500, 12_000), (1, 11_500, 16_000)]


def test_records_that_can_no_longer_pair_are_forgotten_and_later_ones_go_aside(
        operators: Operators) -> None:
    wrapped = Wrapped(joined_pipeline())
    op = operators.make(wrapped.op)
    op.process(wrapped.batch(0, order(1, 10_000)))
    op.process(wrapped.batch(1, payment(2, 10_000)))
    assert op.key_count() > 0
    op.on_watermark(15_000)         # order 1 may still meet a payment at 15 s
    assert pairs(op.process(wrapped.batch(1, payment(1, 15_000)))) == [(1, 10_000, 15_000)]
    op.on_watermark(20_000)         # now nothing at 10 s can pair any more
    assert op.key_count() == 0
    op.side.take()
    assert pairs(op.process(wrapped.batch(0, order(1, 10_000)))) == []  # too late
    late = op.side.take()
    assert [r["order"] for batch in late[LATE] for r in batch.rows] == [1]


def test_join_state_survives_a_checkpoint_restored_at_another_parallelism(
        operators: Operators) -> None:
    wrapped = Wrapped(joined_pipeline())
    first = operators.make(wrapped.op)
    first.process(wrapped.batch(0, *(order(o, 10_000) for o in range(20))))
    blob = operators.checkpoint(first)
    found = []
    for subtask in range(2):
        op = operators.make(wrapped.op, subtask=subtask, parallelism=2)
        op.restore([blob])
        found += pairs(op.process(wrapped.batch(1, *(payment(o, 11_000) for o in range(20)),
                                                owner=op)))
    # Each key is one subtask's: every order pairs once, on whichever owns it.
    assert sorted(found) == [(o, 10_000, 11_000) for o in range(20)]


def test_the_default_joined_record_is_the_firsts_fields_then_the_seconds_built_as_columns(
        operators: Operators) -> None:
    p = Pipeline()
    orders, payments = two_sources(p)
    rows = orders.key_by("order").connect(payments.key_by("order_id")).interval_join(
        lower="0s", upper="5s")
    rows.sink(sinks.discard())
    p.validate()
    assert not plan_stages(p)[-1].keyed.per_record  # type: ignore[union-attr]
    wrapped = Wrapped(p)
    op = operators.make(wrapped.op)
    op.process(wrapped.batch(0, {"order": 1, "ts": 10_000, "amount": 3.0}))
    out = op.process(wrapped.batch(1, payment(1, 11_000, amount=9.5)))
    assert out.has_arrow, "built as columns, not per pair"
    assert out.rows == [{"order": 1, "ts": 10_000, "amount": 3.0, "order_id": 1}]


def test_a_key_of_several_columns_joins_through_records_wrapped_whole(
        operators: Operators) -> None:
    p = Pipeline()
    orders, payments = two_sources(p)
    rows = (orders.key_by(["shop", "order"]).connect(payments.key_by(["shop", "order_id"]))
            .interval_join(lower="0s", upper="5s"))
    rows.sink(sinks.discard())
    p.validate()
    wrapped = Wrapped(p)
    op = operators.make(wrapped.op)
    op.process(wrapped.batch(0, {"shop": "a", "order": 1, "ts": 10_000},
                             {"shop": "b", "order": 1, "ts": 10_000}))
    out = op.process(wrapped.batch(1, {"shop": "b", "order_id": 1, "ts": 12_000,
                                       "amount": 2.0}))
    assert out.rows == [{"shop": "b", "order": 1, "ts": 10_000, "order_id": 1,
                         "amount": 2.0}]


def test_every_pair_of_many_records_per_key_is_the_one_a_nested_loop_finds(
        operators: Operators) -> None:
    rng = random.Random(3)
    lefts = [order(rng.randrange(5), rng.randrange(0, 60_000)) for _ in range(300)]
    rights = [payment(rng.randrange(5), rng.randrange(0, 60_000), amount=float(n))
              for n in range(300)]
    expected = sorted((o["order"], o["ts"], pay["ts"]) for o in lefts for pay in rights
                      if o["order"] == pay["order_id"] and -1_000 <= pay["ts"] - o["ts"] <= 5_000)
    wrapped = Wrapped(joined_pipeline())
    op = operators.make(wrapped.op)
    found: list[tuple[int, int, int]] = []
    for start in range(0, 300, 50):  # the two sides interleaved, in batches
        found += pairs(op.process(wrapped.batch(0, *lefts[start:start + 50])))
        found += pairs(op.process(wrapped.batch(1, *rights[start:start + 50])))
    assert sorted(found) == expected and len(expected) > 100


def test_a_snapshot_keeps_the_records_waiting_at_its_barrier(operators: Operators) -> None:
    wrapped = Wrapped(joined_pipeline())
    op = operators.make(wrapped.op)
    op.process(wrapped.batch(0, order(1, 10_000)))
    snapshot = op.snapshot()
    op.process(wrapped.batch(0, order(2, 10_000)))
    op.on_watermark(30_000)
    again = operators.make(wrapped.op)
    again.restore([snapshot.serialize()])
    assert again.key_count() == 1
    assert pairs(again.process(wrapped.batch(1, payment(1, 11_000)))) == [(1, 10_000, 11_000)]


@pytest.mark.parametrize(("build", "says"), [
    (lambda p, a, b: a.key_by("k").process(lambda r, c: [r]) and b.key_by("k").reduce(min),
     "on the keyed stream of a second source"),
    (lambda p, a, b: a.key_by("k").connect(a.key_by("k")), "continued only once"),
    (lambda p, a, b: a.key_by("k").connect(b), "another source's keyed stream"),
    (lambda p, a, b: a.key_by("k").connect(b.key_by("k")).interval_join(lower="5s",
                                                                        upper="1s"),
     "lower <= upper"),
])
def test_a_wrong_connection_is_refused_in_one_sentence(build: Any, says: str) -> None:
    p = Pipeline()
    a, b = two_sources(p)
    with pytest.raises(PipelineDefinitionError, match=says):
        build(p, a, b)


def test_an_interval_join_without_event_time_is_refused() -> None:
    p = Pipeline()
    a, b = two_sources(p, event_time=False)
    with pytest.raises(PipelineDefinitionError, match="needs event time"):
        a.key_by("k").connect(b.key_by("k")).interval_join(lower="-1s", upper="1s")


def window_joined() -> Pipeline:
    p = Pipeline()
    orders, payments = two_sources(p)
    rows = (orders.key_by("order").connect(payments.key_by("order_id"))
            .window_join(windows.tumbling("10s"),
                         fn=lambda o, pay: {"order": o["order"], "ordered": o["ts"],
                                            "paid": pay["ts"], "amount": pay["amount"]}))
    rows.sink(sinks.discard())
    rows.side_output(LATE).sink(sinks.discard())
    return p


def test_the_window_join_pairs_a_windows_records_when_it_ends_and_forgets_it(
        operators: Operators) -> None:
    wrapped = Wrapped(window_joined())
    op = operators.make(wrapped.op)
    op.process(wrapped.batch(0, order(1, 1_000), order(1, 12_000), order(2, 3_000)))
    op.process(wrapped.batch(1, payment(1, 9_000), payment(1, 10_500), payment(3, 2_000)))
    assert pairs(op.on_watermark(9_999)) == []
    assert pairs(op.on_watermark(10_000)) == [(1, 1_000, 9_000)]   # [0 s, 10 s) ended
    assert pairs(op.on_watermark(20_000)) == [(1, 12_000, 10_500)]
    assert op.key_count() == 0
    op.side.take()
    op.process(wrapped.batch(1, payment(1, 15_000)))                 # its window is gone
    assert [r["order_id"] for b in op.side.take()[LATE] for r in b.rows] == [1]


def test_a_sliding_window_join_pairs_what_a_nested_loop_over_the_windows_pairs(
        operators: Operators) -> None:
    p = Pipeline()
    orders, payments = two_sources(p)
    rows = orders.key_by("order").connect(payments.key_by("order_id")).window_join(
        windows.sliding("10s", every="5s"))
    rows.sink(sinks.discard())
    p.validate()
    rng = random.Random(5)
    lefts = [order(rng.randrange(4), rng.randrange(0, 60_000)) for _ in range(200)]
    rights = [payment(rng.randrange(4), rng.randrange(0, 60_000), amount=float(n))
              for n in range(200)]

    def starts(ts: int) -> list[int]:
        return [s for s in range(ts - ts % 5_000 - 5_000, ts + 1, 5_000) if s <= ts < s + 10_000]

    expected = sorted((o["order"], o["ts"], pay["ts"], start) for o in lefts for pay in rights
                      if o["order"] == pay["order_id"]
                      for start in set(starts(o["ts"])) & set(starts(pay["ts"])))
    wrapped = Wrapped(p)
    owners = [operators.make(wrapped.op, subtask=s, parallelism=2) for s in range(2)]
    for op in owners:
        op.process(wrapped.batch(0, *lefts, owner=op))
    # A checkpoint restored at three subtasks holds every window's waiting records.
    blobs = [operators.checkpoint(op) for op in owners]
    again = [operators.make(wrapped.op, subtask=s, parallelism=3) for s in range(3)]
    found = []
    for op in again:
        op.restore(blobs)
        op.process(wrapped.batch(1, *rights, owner=op))
        out = op.on_watermark(200_000)
        assert out.has_arrow or not len(out), "the default joined record is built as columns"
        found += [(r["order"], r["ts"], r["order_id"]) for r in out.rows]
        assert op.key_count() == 0
    # Each pair once per window the two share (the default record keeps the first's ts;
    # count pairs per (order, order's ts)).
    assert sorted(found) == sorted((o, t, o) for o, t, _, _ in expected)
    assert len(expected) > 200
