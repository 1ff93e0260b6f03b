"""State TTL, against both state backends: an expired value or map entry is never
returned, values nobody reads again are swept away so state does not grow forever,
and the expiry survives a checkpoint and a restore at another parallelism."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from keyed_operators import MAX_P, Operators, keyed_op_of

from job_runtime import Pipeline, sinks, sources
from job_runtime.errors import UserCodeError
from job_runtime.operators.keyed import ProcessOperator, build_keyed_operator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, key_group_of
from job_runtime.state.backend import BACKEND_KINDS

HOUR = 3_600_000


def last_seen(record: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    """Per user: the previous page (gone an hour after it was written) and the pages
    seen, each entry gone an hour after it was put."""
    previous = ctx.value_state("previous", ttl="1h")
    pages = ctx.map_state("pages", ttl="1h")
    out = [{"user": ctx.key, "previous": previous.value(), "pages": sorted(pages.keys()),
            "knows_a": pages.contains("a"), "a": pages.get("a")}]
    previous.update(record["page"])
    pages.put(record["page"], record.get("n", 1))
    return out


def ttl_op(fn: Any = last_seen) -> KeyedOp:
    p = Pipeline()
    (p.source(sources.sequence(count=1)).key_by("user").process(fn).sink(sinks.discard()))
    return keyed_op_of(p)


@pytest.fixture(params=BACKEND_KINDS)
def operators(request: pytest.FixtureRequest, tmp_path: Path) -> Operators:
    return Operators(request.param, tmp_path)


def visit(op: Any, user: str, page: str, **extra: Any) -> dict[str, Any]:
    out = op.process(Batch(rows=[{"user": user, "page": page, **extra}])).rows
    assert len(out) == 1
    row: dict[str, Any] = out[0]
    return row


def stored(op: ProcessOperator, name: str) -> dict[Any, Any]:
    return {key: value for _, key, value in op.backend.iter_entries(f"{op.op.uid}/{name}")}


class TestExpiry:
    def test_a_value_is_there_until_its_ttl_after_the_last_update_and_then_never_again(
            self, operators: Operators) -> None:
        op = operators.make(ttl_op())
        visit(op, "u", "a")
        operators.clock.now += HOUR - 1
        assert visit(op, "u", "b")["previous"] == "a"
        # The update renewed it: an hour from then, not from the first write.
        operators.clock.now += HOUR - 1
        assert visit(op, "u", "c")["previous"] == "b"
        operators.clock.now += HOUR
        assert visit(op, "u", "d")["previous"] is None

    def test_each_map_entry_expires_on_its_own(self, operators: Operators) -> None:
        op = operators.make(ttl_op())
        visit(op, "u", "a", n=7)
        operators.clock.now += HOUR // 2
        visit(op, "u", "b")
        operators.clock.now += HOUR // 2
        seen = visit(op, "u", "c")
        assert seen["pages"] == ["b"]
        assert (seen["knows_a"], seen["a"]) == (False, None)

    def test_the_sweep_removes_what_nobody_reads_so_state_stops_growing(
            self, operators: Operators) -> None:
        op = operators.make(ttl_op())
        assert isinstance(op, ProcessOperator)
        users = [f"user-{i}" for i in range(300)]
        for user in users:
            visit(op, user, "a")
        operators.clock.now += HOUR
        visit(op, "fresh", "a")
        # One key group per sweep, once a second at most: every group within 128 s.
        for _ in range(MAX_P):
            operators.clock.now += 1_000
            op.on_processing_time(operators.clock.now)
        assert set(stored(op, "previous")) == {"fresh"}
        assert set(stored(op, "pages")) == {"fresh"}
        assert op.context.sweeper.removed == 2 * len(users)

    def test_a_state_without_ttl_keeps_its_values_and_stores_them_plainly(
            self, operators: Operators) -> None:
        def plain(record: dict[str, Any], ctx: Any) -> None:
            ctx.value_state("total").update(ctx.value_state("total").value(0) + 1)

        op = operators.make(ttl_op(plain))
        assert isinstance(op, ProcessOperator)
        op.process(Batch(rows=[{"user": "u"}, {"user": "u"}]))
        operators.clock.now += 1000 * HOUR
        op.on_processing_time(operators.clock.now)
        assert stored(op, "total") == {"u": 2}


class TestCheckpoints:
    def test_the_expiry_survives_a_restore_at_another_parallelism(
            self, operators: Operators) -> None:
        early = [f"early-{i}" for i in range(20)]
        late = [f"late-{i}" for i in range(20)]
        old = [operators.make(ttl_op(), subtask=i, parallelism=2) for i in range(2)]
        for users in (early, late):
            for user in users:
                visit(old[key_group_of(user, MAX_P) * 2 // MAX_P], user, "a")
            operators.clock.now += 600_000
        blobs = [operators.checkpoint(op) for op in old]
        new = [operators.make(ttl_op(), subtask=i, parallelism=3) for i in range(3)]
        for op in new:
            op.restore(blobs)
        operators.clock.now += HOUR - 2 * 600_000
        previous = {user: visit(new[key_group_of(user, MAX_P) * 3 // MAX_P], user, "b")
                    ["previous"] for user in early + late}
        assert previous == {**dict.fromkeys(early), **dict.fromkeys(late, "a")}

    def test_expired_values_in_a_checkpoint_are_not_returned_after_the_restore(
            self, operators: Operators) -> None:
        op = operators.make(ttl_op())
        visit(op, "u", "a")
        blob = operators.checkpoint(op)
        operators.clock.now += HOUR
        restored = operators.make(ttl_op())
        restored.restore([blob])
        assert visit(restored, "u", "b")["previous"] is None


class TestMisuse:
    def test_a_ttl_that_is_no_duration_is_a_clear_error(self) -> None:
        def bad(record: dict[str, Any], ctx: Any) -> None:
            ctx.value_state("s", ttl="soon")

        op = build_keyed_operator(op=ttl_op(bad), subtask=0, max_parallelism=MAX_P,
                                  key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="state 's' ttl"):
            op.process(Batch(rows=[{"user": "u"}]))

    def test_one_state_name_with_two_ttls_is_a_clear_error(self) -> None:
        def twice(record: dict[str, Any], ctx: Any) -> None:
            ctx.value_state("s", ttl="1h")
            ctx.map_state("s", ttl="2h")

        op = build_keyed_operator(op=ttl_op(twice), subtask=0, max_parallelism=MAX_P,
                                  key_groups=range(MAX_P))
        with pytest.raises(UserCodeError, match="two TTLs"):
            op.process(Batch(rows=[{"user": "u"}]))
