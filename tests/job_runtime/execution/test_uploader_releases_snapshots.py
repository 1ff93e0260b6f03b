"""An uploaded snapshot is let go as soon as its acknowledgement is sent.

A hashmap snapshot holds the dicts of every key group as they were at the barrier;
each write after it copies a group, so while the snapshot lives the old and the new
dicts are both in memory. Were the upload thread to keep its last job until the next
one arrives, a job writing across all its state would hold twice its state between
checkpoints, and a job whose checkpoints are minutes apart would hold it for minutes.
"""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import Any

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from job_runtime.coordinator.messages import Ack, ToCoordinator
from job_runtime.execution.subtask.uploader import Uploader, UploadJob

WAIT = 30.0


class Snapshot:
    """A snapshot whose lifetime the test can watch."""

    def serialize(self) -> bytes:
        return b"state"


def test_the_upload_thread_holds_no_snapshot_once_it_has_acknowledged(tmp_path: Path) -> None:
    acked = threading.Event()
    received: list[int] = []

    def send(message: ToCoordinator) -> None:
        assert isinstance(message, Ack), message
        received.append(message.checkpoint_id)
        acked.set()

    uploader = Uploader(storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "job-uid1"),
                        subtask=0, epoch=1, send=send)
    snapshot = Snapshot()
    alive = weakref.ref(snapshot)
    snapshots: dict[str, tuple[Any, list[int]]] = {"keyed": (snapshot, [0, 127])}
    uploader.submit(UploadJob(checkpoint_id=1, stage=0, subtask=0, snapshots=snapshots,
                              sources={}, sinks={}, channel_state=None,
                              channel_uid="s-channels", stats={}))
    del snapshot, snapshots
    try:
        assert acked.wait(WAIT)
        for _ in range(200):
            gc.collect()
            if alive() is None:
                break
            threading.Event().wait(0.01)
        assert alive() is None, "the upload thread still holds the acknowledged snapshot"
        assert received == [1]
    finally:
        uploader.close()
