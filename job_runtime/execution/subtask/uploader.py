"""The asynchronous part of snapshots: serialise and upload in a background thread.

The task thread hands over references (copy-on-write dicts and arrays, the sink's
closed interval) and goes on processing records; this thread turns them into
bytes, writes them to checkpoint storage, makes the sink's pre-commit durable,
and only then acknowledges the checkpoint to the coordinator.

The queue is bounded. Each queued job holds a whole snapshot (references to
copy-on-write state, in-flight channel data), so when storage is slower than
the checkpoint interval an unbounded queue grows until the executor runs out
of memory. A full queue makes the submitting task thread wait: that is
backpressure (the task stops taking records, its inputs fill up, the sources
slow down) and costs nothing but time. Declining instead would turn slow
storage into failed checkpoints, which count against ``tolerableFailures``
and end the job, while waiting lets the coordinator's own timeout decide.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from job_runtime.coordinator.messages import (
    Ack,
    AckState,
    AckStats,
    Decline,
    OperatorState,
    ToCoordinator,
)
from job_runtime.sinks.sink_contract import SinkSnapshot
from job_runtime.state.backend import IncrementalSnapshot

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED = 8
"""Upload jobs waiting at most: a few checkpoints' worth of every task of a subtask."""


@dataclasses.dataclass(kw_only=True)
class UploadJob:
    checkpoint_id: int
    stage: int
    subtask: int
    snapshots: dict[str, tuple[Any, list[int]]]   # uid -> (snapshot, [kg_lo, kg_hi])
    sources: dict[str, Any]
    sinks: dict[str, SinkSnapshot]
    """The pre-commits of the task's sinks by name, begun at the barrier; completed
    here before the ack."""
    channel_state: dict[int, list[Any]] | None
    channel_uid: str
    stats: dict[str, float]


class Uploader:
    def __init__(self, *, storage: CheckpointStorage, subtask: int, epoch: int,
                 send: Callable[[ToCoordinator], None], max_queued: int = DEFAULT_MAX_QUEUED,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self._storage = storage
        self._subtask = subtask
        self._epoch = epoch
        self._send = send
        self._cancelled = cancelled
        self._queue: queue.Queue[UploadJob | None] = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(target=self._run, daemon=True, name="snapshot-uploader")
        self._thread.start()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, job: UploadJob) -> None:
        """Queue ``job``, waiting while the queue is full (backpressure, see above).

        Once the subtask is cancelled the job is dropped: nobody will acknowledge it.
        """
        while not self._cancelled():
            try:
                self._queue.put(job, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._upload(job)
            # Let go of the snapshot now, not when the next job arrives: until it is
            # dropped, every key group written since its barrier is held twice.
            del job

    def _upload(self, job: UploadJob) -> None:
        started = time.perf_counter()
        try:
            total = 0
            operators: dict[str, OperatorState] = {}
            for uid, (snapshot, key_groups) in job.snapshots.items():
                groups = (key_groups[0], key_groups[1])
                if isinstance(snapshot, IncrementalSnapshot):
                    uploaded = snapshot.upload(storage=self._storage,
                                               checkpoint_id=job.checkpoint_id,
                                               operator=uid, subtask=job.subtask)
                    total += uploaded.uploaded_bytes
                    operators[uid] = OperatorState(handle=uploaded.handle,
                                                   key_groups=groups, shared=uploaded.shared)
                    continue
                data = snapshot.serialize()
                handle = self._storage.write_state(job.checkpoint_id, uid, job.subtask, data)
                total += handle.size_bytes
                operators[uid] = OperatorState(handle=handle, key_groups=groups)
            channels: StateHandle | None = None
            if job.channel_state:
                rows = {c: [b.rows for b in batches]
                        for c, batches in job.channel_state.items() if batches}
                if rows:
                    data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
                    channels = self._storage.write_state(job.checkpoint_id, job.channel_uid,
                                                         job.subtask, data)
                    total += channels.size_bytes
            # The sinks' staged data must be durable before any ack names it.
            sinks = {name: snapshot.complete() for name, snapshot in job.sinks.items()}
            stats = AckStats(sync_ms=job.stats.get("sync_ms", 0.0),
                             alignment_ms=job.stats.get("alignment_ms", 0.0),
                             async_ms=(time.perf_counter() - started) * 1000.0, bytes=total)
            self._send(Ack(epoch=self._epoch, subtask=self._subtask,
                           checkpoint_id=job.checkpoint_id, stage=job.stage,
                           state=AckState(sources=job.sources, operators=operators,
                                          channels=channels, sinks=sinks),
                           stats=stats))
        except Exception as exc:
            log.warning("snapshot upload of checkpoint %d failed: %s", job.checkpoint_id, exc)
            try:
                self._send(Decline(epoch=self._epoch, subtask=self._subtask,
                                   checkpoint_id=job.checkpoint_id,
                                   reason=f"upload failed: {exc}"))
            except Exception:
                log.warning("could not decline checkpoint %d", job.checkpoint_id)
