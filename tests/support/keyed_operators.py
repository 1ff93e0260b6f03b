"""Keyed operators of either state backend, checkpointed through real checkpoint
storage on the local file system, with a processing-time clock the test moves."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from job_runtime import Pipeline
from job_runtime.execution.stages import plan_stages
from job_runtime.operators.keyed import build_keyed_operator
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.pipeline import KeyedOp
from job_runtime.records import key_group_range
from job_runtime.state.backend import IncrementalSnapshot, StateBackendSettings

MAX_P = 128


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Operators:
    """Operators of one backend kind, checkpointed through real checkpoint storage."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.storage = CheckpointStorage(f"file://{tmp_path}/checkpoints", "job-u1")
        self.settings = StateBackendSettings(kind="rocksdb" if kind == "rocksdb" else "hashmap",
                                             local_dir=str(tmp_path / "local"),
                                             storage=self.storage)
        self.clock = Clock()
        self._next_id = 0

    def make(self, op: KeyedOp, *, subtask: int = 0, parallelism: int = 1) -> KeyedOperator:
        return build_keyed_operator(
            op=op, subtask=subtask, max_parallelism=MAX_P, state=self.settings,
            clock=self.clock,
            key_groups=key_group_range(subtask, parallelism=parallelism, max_parallelism=MAX_P))

    def checkpoint(self, operator: KeyedOperator) -> bytes:
        self._next_id += 1
        snapshot = operator.snapshot()
        if isinstance(snapshot, IncrementalSnapshot):
            uploaded = snapshot.upload(storage=self.storage, checkpoint_id=self._next_id,
                                       operator=operator.op.uid, subtask=operator.subtask)
            operator.notify_complete(self._next_id)
            return self.storage.read_state(uploaded.handle)
        return snapshot.serialize()

    def restart(self, old: list[KeyedOperator], *, parallelism: int,
                op: KeyedOp) -> list[KeyedOperator]:
        """Every operator checkpointed, and restored into ``parallelism`` new ones."""
        blobs = [self.checkpoint(o) for o in old]
        new = [self.make(op, subtask=s, parallelism=parallelism) for s in range(parallelism)]
        for o in new:
            o.restore(blobs)
        return new


def keyed_op_of(p: Pipeline) -> KeyedOp:
    """The keyed operator of a pipeline with one ``key_by``, as its stage runs it."""
    keyed = plan_stages(p)[1].keyed
    assert keyed is not None
    return keyed


def session_reference(frame: pd.DataFrame, gap: int) -> list[tuple[str, int, int, int, float]]:
    """Sessions of ``user``, ``ts`` (ms) and ``amount`` columns computed in one go: per
    key, sorted by time, a new session wherever the time since the previous record is
    at least ``gap``; ``(user, start, end, n, total)`` sorted."""
    frame = frame.sort_values(["user", "ts"], kind="stable")
    new_session = (frame["user"] != frame["user"].shift()) | (frame["ts"].diff() >= gap)
    frame = frame.assign(session=new_session.cumsum())
    grouped = frame.groupby("session").agg(user=("user", "first"), start=("ts", "min"),
                                           last=("ts", "max"), n=("ts", "size"),
                                           total=("amount", "sum"))
    return sorted((r.user, int(r.start), int(r.last) + gap, int(r.n), float(r.total))
                  for r in grouped.itertuples())
