"""A checkpoint's keyed state against the pipeline that restores it: which operators'
state the new pipeline cannot take as it was written (renamed or removed operators,
another kind, key or state layout, in-flight data of a stage whose operator changed),
and what a restore that may drop them keeps.
"""

from __future__ import annotations

import dataclasses

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.metadata import (
    ChannelStateHandle,
    CheckpointMetadata,
    KeyedStateHandle,
    OperatorDescriptor,
)
from job_runtime import Pipeline, sinks, sources, windows
from job_runtime.execution.driver.compatibility import StateChange, incompatibilities, without
from job_runtime.execution.operator_descriptors import describe_operators
from job_runtime.execution.stages import plan_stages


def handle(uid: str) -> tuple[KeyedStateHandle, ...]:
    return (KeyedStateHandle(subtask=0, handle=StateHandle(uri=f"file:///c/chk-3/{uid}/0",
                                                           size_bytes=10, crc32=1),
                             key_groups=(0, 128)),)


def descriptors(build: object) -> tuple[OperatorDescriptor, ...]:
    p = Pipeline()
    build(p)  # type: ignore[operator]
    return describe_operators(plan_stages(p))


def running_total(p: Pipeline, *, name: str | None = "total", key: str = "key") -> None:
    (p.source(sources.sequence(count=10)).map(lambda r: {"key": r["seq"] % 3, "v": 1})
     .key_by(key).reduce(lambda a, b: a, name=name).sink(sinks.discard()))


def checkpoint(pipeline: tuple[OperatorDescriptor, ...] | None, *, state: list[str],
               channels: dict[int, int] | None = None) -> CheckpointMetadata:
    return CheckpointMetadata(
        job="job-uid", checkpoint_id=3, timestamp=0.0, final=False, attempt=1,
        parallelism=1, max_parallelism=128, operators={uid: handle(uid) for uid in state},
        channels={stage: (ChannelStateHandle(subtask=0, handle=StateHandle(
            uri=f"file:///c/chk-3/s{stage}", size_bytes=1, crc32=1)),)
            for stage in (channels or {})},
        pipeline=pipeline)


class TestWhatFits:
    def test_the_same_pipeline_fits_its_own_checkpoint(self) -> None:
        same = descriptors(running_total)
        assert incompatibilities(checkpoint(same, state=["total"]), same) == []

    def test_an_operator_added_or_one_that_held_no_state_is_no_mismatch(self) -> None:
        before = descriptors(running_total)
        after = descriptors(lambda p: (
            p.source(sources.sequence(count=10)).map(lambda r: {"key": 1, "v": 1})
            .key_by("key").reduce(lambda a, b: a, name="total")
            .key_by("key").reduce(lambda a, b: a, name="again").sink(sinks.discard())))
        assert incompatibilities(checkpoint(before, state=["total"]), after) == []
        assert incompatibilities(checkpoint(after, state=[]), before) == []


class TestWhatDoesNotFit:
    def test_a_renamed_operator_leaves_its_state_unmapped_and_is_named(self) -> None:
        before = descriptors(running_total)
        after = descriptors(lambda p: running_total(p, name="sum"))
        (found,) = incompatibilities(checkpoint(before, state=["total"]), after)
        assert found.change is StateChange.UNMAPPED and found.operator == "total"
        assert found.describe() == ("operator 'total' (reduce) holds state, but the job has no "
                                    "operator of that name (its stateful operators: 'sum')")

    def test_an_operator_inserted_before_an_unnamed_one_changes_its_name(self) -> None:
        before = descriptors(lambda p: running_total(p, name=None))
        after = descriptors(lambda p: (
            p.source(sources.sequence(count=10)).filter(lambda r: True)
            .map(lambda r: {"key": r["seq"] % 3, "v": 1})
            .key_by("key").reduce(lambda a, b: a).sink(sinks.discard())))
        (old_uid,) = [op.uid for op in before]
        (found,) = incompatibilities(checkpoint(before, state=[old_uid]), after)
        assert found.change is StateChange.UNMAPPED and found.operator == old_uid

    def test_a_checkpoint_without_descriptors_is_compared_by_name_only(self) -> None:
        after = descriptors(lambda p: running_total(p, name="sum"))
        (found,) = incompatibilities(checkpoint(None, state=["total"]), after)
        assert found.change is StateChange.UNMAPPED
        assert incompatibilities(checkpoint(None, state=["sum"]), after) == []

    def test_another_kind_key_or_layout_of_the_same_name_is_named(self) -> None:
        before = descriptors(lambda p: (
            p.source(sources.sequence(count=10), watermarks=None)
            .map(lambda r: {"key": 1, "user": 2, "v": 1, "ts": 0})
            .key_by("key").aggregate(n="count", name="stats").sink(sinks.discard())))
        other_key = descriptors(lambda p: (
            p.source(sources.sequence(count=10))
            .map(lambda r: {"key": 1, "user": 2, "v": 1, "ts": 0})
            .key_by("user").aggregate(n="count", name="stats").sink(sinks.discard())))
        more_aggregates = descriptors(lambda p: (
            p.source(sources.sequence(count=10))
            .map(lambda r: {"key": 1, "user": 2, "v": 1, "ts": 0})
            .key_by("key").aggregate(n="count", total=("sum", "v"), name="stats")
            .sink(sinks.discard())))
        other_kind = descriptors(lambda p: (
            p.source(sources.sequence(count=10))
            .map(lambda r: {"key": 1, "user": 2, "v": 1, "ts": 0})
            .key_by("key").reduce(lambda a, b: a, name="stats").sink(sinks.discard())))
        held = checkpoint(before, state=["stats"])
        assert [f.change for f in incompatibilities(held, other_key)] == [StateChange.KEY]
        assert [f.change for f in incompatibilities(held, more_aggregates)] == [
            StateChange.LAYOUT]
        changes = {f.change for f in incompatibilities(held, other_kind)}
        assert StateChange.KIND in changes
        (kind,) = [f for f in incompatibilities(held, other_kind) if f.change is StateChange.KIND]
        assert kind.describe() == "operator 'stats' changed kind from aggregate to reduce"

    def test_a_window_of_another_size_is_another_layout(self) -> None:
        def windowed(size: str) -> tuple[OperatorDescriptor, ...]:
            from job_runtime import watermarks
            return descriptors(lambda p: (
                p.source(sources.sequence(count=10), watermarks=watermarks.bounded_out_of_orderness(
                    "seq", max_delay="1s"))
                .key_by("seq").window(windows.tumbling(size)).aggregate(n="count", name="w")
                .sink(sinks.discard())))
        (found,) = incompatibilities(checkpoint(windowed("1m"), state=["w"]), windowed("5m"))
        assert found.change is StateChange.LAYOUT and "60000ms" in found.was

    def test_in_flight_data_of_a_stage_whose_operator_changed_is_named(self) -> None:
        before = descriptors(running_total)
        after = descriptors(lambda p: running_total(p, name="sum"))
        found = incompatibilities(checkpoint(before, state=[], channels={1: 1}), after)
        assert [(f.change, f.operator) for f in found] == [(StateChange.IN_FLIGHT, "stage 1")]


class TestDroppingState:
    def test_without_keeps_everything_but_the_dropped_operators_and_stages(self) -> None:
        before = descriptors(running_total)
        after = descriptors(lambda p: running_total(p, name="sum"))
        held = dataclasses.replace(checkpoint(before, state=["total"], channels={1: 1}),
                                   sources={0: 5})
        kept = without(held, incompatibilities(held, after))
        assert kept.operators == {} and kept.channels == {}
        assert kept.sources == {0: 5} and kept.checkpoint_id == 3
