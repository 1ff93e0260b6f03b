"""The snapshot uploader's queue is bounded: a slow upload path holds the task back.

Each queued upload job holds a whole snapshot. When uploads (or acknowledgements)
are slower than the checkpoints, the task that submits must wait for room rather
than pile snapshots up in memory.
"""

from __future__ import annotations

import threading
from pathlib import Path

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from job_runtime.coordinator.messages import Ack, ToCoordinator
from job_runtime.execution.subtask.uploader import Uploader, UploadJob

WAIT = 30.0


def job(checkpoint_id: int) -> UploadJob:
    return UploadJob(checkpoint_id=checkpoint_id, stage=0, subtask=0, snapshots={},
                     sources={"0": checkpoint_id}, sinks={}, channel_state=None,
                     channel_uid="s-channels", stats={})


class SlowCoordinator:
    """Receives acknowledgements only while ``open`` is set."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.acked: list[int] = []

    def send(self, message: ToCoordinator) -> None:
        assert self.open.wait(WAIT)
        assert isinstance(message, Ack), message
        self.acked.append(message.checkpoint_id)


def test_a_full_upload_queue_makes_the_submitting_task_wait(tmp_path: Path) -> None:
    coordinator = SlowCoordinator()
    uploader = Uploader(storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "job-uid1"),
                        subtask=0, epoch=1, send=coordinator.send, max_queued=2)
    submitted: list[int] = []

    def task() -> None:
        for checkpoint_id in range(1, 11):
            uploader.submit(job(checkpoint_id))
            submitted.append(checkpoint_id)

    thread = threading.Thread(target=task, daemon=True)
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive(), "ten snapshots were queued behind a stalled upload"
    assert uploader.queued <= 2
    assert len(submitted) <= 4  # two queued, one uploading, one being handed over

    coordinator.open.set()
    thread.join(timeout=WAIT)
    uploader.close()
    assert coordinator.acked == list(range(1, 11))


def test_a_cancelled_subtask_stops_waiting_for_room(tmp_path: Path) -> None:
    coordinator = SlowCoordinator()
    cancelled = threading.Event()
    uploader = Uploader(storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "job-uid1"),
                        subtask=0, epoch=1, send=coordinator.send, max_queued=1, cancelled=cancelled.is_set)
    for checkpoint_id in range(1, 3):
        uploader.submit(job(checkpoint_id))
    waiting = threading.Thread(target=uploader.submit, args=(job(3),), daemon=True)
    waiting.start()
    cancelled.set()
    waiting.join(timeout=WAIT)
    assert not waiting.is_alive()
    coordinator.open.set()
