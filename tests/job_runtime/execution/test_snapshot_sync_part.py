"""The synchronous part of a snapshot costs milliseconds whatever the data.

A barrier stops a task only for references and flags: ``MapState`` maps and the
``aggregate`` arrays are copied on the first write after the snapshot (once per
checkpoint interval, never per record), and the files sink writes an interval's
output to its staging file in the background. Each snapshot must still see the
state as it was at its barrier, and a checkpoint must not be acknowledged before
the sink's staged file is durable.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.storage.s3 import S3Config
from cjob_spec.model import CheckpointMode
from job_runtime.coordinator.messages import Ack, ToCoordinator
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.stages import StagePlan
from job_runtime.execution.subtask.task import Task
from job_runtime.execution.subtask.uploader import Uploader, UploadJob
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.pipeline import KeyedOp, Pipeline
from job_runtime.records import Batch, key_group_of
from job_runtime.sinks import discard, files
from job_runtime.sinks.sink_contract import SinkContext, SinkWriter
from job_runtime.sources import sequence
from job_runtime.state.handles import MapState, ProcessContext
from job_runtime.state.hashmap import HashMapStateBackend, deserialize_keyed_state

MAX_P = 128
WAIT = 30.0


# --------------------------------------------------------------------------- MapState


def map_state(key: Any = "user") -> tuple[HashMapStateBackend, MapState, int]:
    backend = HashMapStateBackend(key_groups=range(0, MAX_P))
    context = ProcessContext(backend=backend, operator="op")
    group = key_group_of(key, MAX_P)
    context.set_key(key, group)
    return backend, context.map_state("m"), group


def snapshot_map(snapshot: Any, group: int, key: Any = "user") -> dict[Any, Any]:
    value: dict[Any, Any] = deserialize_keyed_state(snapshot.serialize())[group]["op/m"][key]
    return value


class TestMapStateCopyOnWrite:
    def test_a_snapshot_taken_before_puts_and_removes_serialises_the_old_map(self) -> None:
        backend, state, group = map_state()
        state.put("a", 1)
        state.put("b", 2)
        snapshot = backend.snapshot()
        state.put("a", 10)
        state.put("c", 3)
        state.remove("b")
        assert snapshot_map(snapshot, group) == {"a": 1, "b": 2}
        assert dict(state.items()) == {"a": 10, "c": 3}

    def test_two_snapshots_of_one_interval_each_keep_their_own_map(self) -> None:
        backend, state, group = map_state()
        state.put("a", 1)
        first = backend.snapshot()
        state.put("a", 2)
        second = backend.snapshot()
        state.remove("a")
        state.put("b", 3)
        assert snapshot_map(first, group) == {"a": 1}
        assert snapshot_map(second, group) == {"a": 2}
        assert dict(state.items()) == {"b": 3}

    def test_puts_after_a_snapshot_copy_the_map_once_per_interval(self) -> None:
        backend, state, group = map_state()
        for i in range(100):
            state.put(i, i)
        shared = backend.get("op/m", group, "user")
        backend.snapshot()
        state.put("x", 1)
        copied = backend.get("op/m", group, "user")
        assert copied is not shared, "a put changed the map the snapshot holds"
        state.put("y", 2)
        state.remove(3)
        state.put(4, -4)
        assert backend.get("op/m", group, "user") is copied, "a put copied the map again"
        assert len(shared) == 100 and shared[4] == 4

    def test_puts_between_snapshots_never_copy_the_map(self) -> None:
        backend, state, group = map_state()
        state.put("first", 0)
        live = backend.get("op/m", group, "user")
        for i in range(50):
            state.put(i, i)
            state.remove(i - 1)
        assert backend.get("op/m", group, "user") is live

    def test_a_value_state_update_of_the_key_is_never_mutated_by_a_later_put(self) -> None:
        backend, state, group = map_state()
        state.put("a", 1)
        replacement = {"z": 26}
        backend.put("op/m", group, "user", replacement)
        state.put("b", 2)
        assert replacement == {"z": 26}
        assert dict(state.items()) == {"z": 26, "b": 2}

    def test_a_restored_map_is_copied_before_its_first_put(self) -> None:
        backend, state, group = map_state()
        state.put("a", 1)
        blob = backend.snapshot().serialize()
        restored = HashMapStateBackend(key_groups=range(0, MAX_P))
        restored.restore([blob])
        context = ProcessContext(backend=restored, operator="op")
        context.set_key("user", group)
        snapshot = restored.snapshot()
        context.map_state("m").put("a", 2)
        assert snapshot_map(snapshot, group) == {"a": 1}


# --------------------------------------------------------------------------- aggregate


def aggregate_op() -> KeyedOp:
    p = Pipeline(args={})
    (p.source(sequence(count=1)).key_by("k")
     .aggregate(n="count", total=("sum", "v"), low=("min", "v"), high=("max", "v"))
     .sink(discard()))
    return p.keyed_ops[0]


def batch(*pairs: tuple[str, float]) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pydict({"k": [k for k, _ in pairs],
                                                   "v": [v for _, v in pairs]}))


def aggregate_operator() -> Any:
    return build_keyed_operator(op=aggregate_op(), subtask=0, key_groups=range(0, MAX_P),
                                max_parallelism=MAX_P)


def restored_rows(blob: bytes, *keys: str) -> dict[str, dict[str, Any]]:
    """The aggregates a restored operator holds for ``keys`` (a zero-weight probe)."""
    fresh = aggregate_operator()
    fresh.restore([blob])
    out = fresh.process(batch(*[(k, 0.0) for k in keys])).rows
    return {r["k"]: {"n": r["n"] - 1, "total": r["total"]} for r in out}


class TestAggregateCopyOnWrite:
    def test_a_snapshot_taken_before_updates_of_existing_keys_serialises_the_old_values(
            self) -> None:
        operator = aggregate_operator()
        operator.process(batch(("a", 1.0), ("b", 2.0)))
        snapshot = operator.snapshot()
        operator.process(batch(("a", 5.0), ("b", 5.0)))   # only known keys: in place
        operator.process(batch(("b", 1.0)))
        assert restored_rows(snapshot.serialize(), "a", "b") == {
            "a": {"n": 1, "total": 1.0}, "b": {"n": 1, "total": 2.0}}

    def test_a_snapshot_copies_no_array(self) -> None:
        operator = aggregate_operator()
        operator.process(batch(*[(f"k{i}", float(i)) for i in range(1000)]))
        first = operator.snapshot()
        second = operator.snapshot()
        for name, values in first.accumulators.items():
            assert np.shares_memory(values, second.accumulators[name]), name
        # The keys are an Arrow array (immutable): the same one, not a copy of it.
        assert first.keys is second.keys

    def test_updates_after_a_snapshot_copy_the_arrays_once_per_interval(self) -> None:
        operator = aggregate_operator()
        operator.process(batch(("a", 1.0), ("b", 2.0)))
        operator.snapshot()
        copies = operator.array_copies
        operator.process(batch(("a", 1.0)))
        after_first = operator.array_copies
        assert after_first > copies
        operator.process(batch(("b", 1.0)))
        operator.process(batch(("a", 1.0), ("b", 1.0)))
        assert operator.array_copies == after_first
        operator.snapshot()
        operator.process(batch(("a", 1.0)))
        assert operator.array_copies == 2 * after_first - copies

    def test_new_keys_after_a_snapshot_leave_the_snapshot_alone(self) -> None:
        operator = aggregate_operator()
        operator.process(batch(("a", 1.0)))
        snapshot = operator.snapshot()
        operator.process(batch(("a", 2.0), ("c", 3.0)))
        operator.process(batch(("a", 2.0)))
        assert snapshot.key_count() == 1
        assert restored_rows(snapshot.serialize(), "a") == {"a": {"n": 1, "total": 1.0}}

    def test_keys_added_within_and_past_the_arrays_capacity_leave_a_snapshot_alone(
            self) -> None:
        operator = aggregate_operator()
        operator.process(batch(*[(f"k{i}", 1.0) for i in range(700)]))
        snapshot = operator.snapshot()
        groups = snapshot.groups.copy()
        # New keys first fill the arrays' spare room behind the snapshot's entries,
        # then outgrow it; the old keys change in between.
        operator.process(batch(*[(f"n{i}", 5.0) for i in range(300)]))
        operator.process(batch(*[(f"k{i}", 2.0) for i in range(0, 700, 3)]))
        operator.process(batch(*[(f"m{i}", 7.0) for i in range(5000)]))
        operator.process(batch(("k1", 4.0)))

        assert snapshot.key_count() == 700
        assert np.array_equal(snapshot.groups, groups)
        assert restored_rows(snapshot.serialize(), "k0", "k1", "k699") == {
            "k0": {"n": 1, "total": 1.0}, "k1": {"n": 1, "total": 1.0},
            "k699": {"n": 1, "total": 1.0}}
        later = operator.snapshot()
        assert later.key_count() == 6000
        assert restored_rows(later.serialize(), "k0", "k1", "n0", "m4999") == {
            "k0": {"n": 2, "total": 3.0}, "k1": {"n": 2, "total": 5.0},
            "n0": {"n": 1, "total": 5.0}, "m4999": {"n": 1, "total": 7.0}}


# --------------------------------------------------------------------------- files sink


class InProcessContext:
    """The task-to-subtask seam with nothing behind it: snapshots are kept, not sent."""

    def __init__(self) -> None:
        self.submitted: list[UploadJob] = []
        self.config = SubtaskConfig(
            job_id="job-uid1", job_name="job", entrypoint="m:f", python_path=(),
            args={}, parallelism=1, max_parallelism=MAX_P, coordinator_host="127.0.0.1",
            coordinator_port=0, checkpoint_root="", staging_uri="", mode=CheckpointMode.EXACTLY_ONCE,
            unaligned=False)

    @property
    def subtask(self) -> int:
        return 0

    @property
    def s3_config(self) -> S3Config | None:
        return None

    def is_cancelled(self) -> bool:
        return False

    def submit_snapshot(self, job: UploadJob) -> None:
        self.submitted.append(job)

    def read_state(self, handle: StateHandle) -> bytes:
        raise AssertionError("nothing is restored here")

    def source_finished(self) -> None:
        return None

    def decline(self, checkpoint_id: int, reason: str, *, subsumed: bool) -> None:
        raise AssertionError(f"declined {checkpoint_id}: {reason}")

    def task_failed(self, exc: BaseException) -> None:
        raise exc


def sink_task(out: Path) -> tuple[Task, SinkWriter, InProcessContext]:
    writer = files(str(out), format="jsonl").open(context=SinkContext(
        subtask=0, parallelism=1, attempt_tag="a1e1", job_id="job-uid1"))
    context = InProcessContext()
    task = Task(runtime=context, plan=StagePlan(index=0, has_sink=True), outputs=[],
                sink=writer)
    return task, writer, context


def staged(out: Path) -> list[Path]:
    pending = out / "_pending"
    return sorted(pending.iterdir()) if pending.exists() else []


def lines(path: Path) -> list[int]:
    return [json.loads(line)["n"] for line in path.read_text().splitlines() if line]


class RecordingCoordinator:
    """Receives acknowledgements and looks at the sink's staging area as each arrives."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.acks: list[Ack] = []
        self.staged_at_ack: list[list[int]] = []
        self.arrived = threading.Event()

    def send(self, message: ToCoordinator) -> None:
        assert isinstance(message, Ack), message
        self.staged_at_ack.append(sorted(n for f in staged(self.out) for n in lines(f)))
        self.acks.append(message)
        self.arrived.set()


class TestFilesSinkPreCommitInTheBackground:
    def test_the_barrier_does_not_wait_for_the_interval_to_be_written(self,
                                                                      tmp_path: Path) -> None:
        out = tmp_path / "out"
        task, _, context = sink_task(out)
        task.emit(Batch(rows=[{"n": n} for n in range(500)]))
        task.snapshot(1, alignment_seconds=0.0)
        assert len(context.submitted) == 1
        assert staged(out) == [], "the barrier wrote the interval's staging file"

    def test_records_after_the_barrier_belong_to_the_next_checkpoint(self,
                                                                     tmp_path: Path) -> None:
        out = tmp_path / "out"
        task, writer, context = sink_task(out)
        coordinator = RecordingCoordinator(out)
        uploader = Uploader(storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "job-uid1"),
                            subtask=0, epoch=1, send=coordinator.send)
        task.emit(Batch(rows=[{"n": 1}, {"n": 2}]))
        task.snapshot(1, alignment_seconds=0.0)
        task.emit(Batch(rows=[{"n": 3}]))
        task.snapshot(2, alignment_seconds=0.0)
        for job in context.submitted:
            uploader.submit(job)
        uploader.close()
        assert [a.checkpoint_id for a in coordinator.acks] == [1, 2]
        writer.notify_complete(2)
        committed = sorted(p for p in out.iterdir() if p.is_file())
        assert [lines(p) for p in committed] == [[1, 2], [3]]

    def test_the_acknowledgement_waits_until_the_staging_file_is_durable(
            self, tmp_path: Path) -> None:
        out = tmp_path / "out"
        task, writer, context = sink_task(out)
        coordinator = RecordingCoordinator(out)
        uploader = Uploader(storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "job-uid1"),
                            subtask=0, epoch=1, send=coordinator.send)
        task.emit(Batch(rows=[{"n": n} for n in range(2000)]))
        task.snapshot(1, alignment_seconds=0.0)
        (job,) = context.submitted
        uploader.submit(job)
        assert coordinator.arrived.wait(WAIT)
        uploader.close()

        (ack,) = coordinator.acks
        assert coordinator.staged_at_ack == [list(range(2000))]
        (transaction,) = ack.state.sinks["sink"]
        assert Path(transaction[1]).name == staged(out)[0].name
        json.dumps(ack.state.sinks)  # the acknowledgement's sink state stays plain JSON
        writer.notify_complete(1)
        assert staged(out) == []
        (part,) = [p for p in out.iterdir() if p.is_file()]
        assert lines(part) == list(range(2000))

    @pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
    def test_a_synchronous_snapshot_still_stages_before_it_returns(self, tmp_path: Path,
                                                                   fmt: str) -> None:
        out = tmp_path / "out"
        writer = files(str(out), format=fmt).open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1"))
        writer.write(Batch(arrow=pa.RecordBatch.from_pydict({"n": [1, 2]})))
        state = writer.snapshot(1)
        assert len(state) == 1 and Path(state[0][1]).exists()


def s3_visible(s3_faults: Any, prefix: str) -> list[int]:
    client = s3_faults.bucket.client
    listed = client.list_objects_v2(Bucket=s3_faults.bucket.bucket, Prefix=f"{prefix}/")
    found: list[int] = []
    for item in listed.get("Contents", []):
        name = item["Key"][len(prefix) + 1:]
        if name.startswith(("_", ".")):
            continue
        body = client.get_object(Bucket=s3_faults.bucket.bucket, Key=item["Key"])["Body"]
        found.extend(json.loads(line)["n"] for line in body.read().decode().splitlines())
    return sorted(found)


class TestAPreCommitThatDidNotFinish:
    def test_an_interval_whose_pre_commit_was_dropped_is_staged_by_the_next_one(
            self, tmp_path: Path) -> None:
        """A newer barrier may drop an unaligned checkpoint's pending ack, and an
        abort drops it too: its records must still reach the output."""
        out = tmp_path / "out"
        writer = files(str(out)).open(context=SinkContext(subtask=0, parallelism=1,
                                                          attempt_tag="a1e1"))
        writer.write(Batch(rows=[{"n": 1}, {"n": 2}]))
        writer.begin_snapshot(1)                 # never completed
        writer.write(Batch(rows=[{"n": 3}]))
        state = writer.begin_snapshot(2).complete()
        assert [fields[0] for fields in state] == [1, 2]
        writer.notify_complete(2)
        assert sorted(n for p in out.iterdir() if p.is_file() for n in lines(p)) == [1, 2, 3]

    def test_a_staging_that_fails_declines_and_the_next_checkpoint_stages_it_again(
            self, s3_faults: Any) -> None:
        path = f"{s3_faults.uri}/staged"
        writer = files(path).open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1", s3=s3_faults.s3_config))
        writer.write(Batch(rows=[{"n": 1}, {"n": 2}]))
        first = writer.begin_snapshot(1)
        s3_faults.proxy.fail_with(503, "ServiceUnavailable")
        try:
            with pytest.raises(Exception):  # noqa: B017 - whatever the client raises
                first.complete()
        finally:
            s3_faults.proxy.pass_through()
        writer.write(Batch(rows=[{"n": 3}]))
        state = writer.begin_snapshot(2).complete()
        assert [fields[0] for fields in state] == [1, 2]
        writer.notify_complete(2)
        assert s3_visible(s3_faults, "staged") == [1, 2, 3]
