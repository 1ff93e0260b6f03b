"""Suspending a running job: its output up to the suspend checkpoint is committed before
the driver stops, and resuming from that checkpoint neither repeats nor loses a record.

An in-process coordinator (memory store, ``file://`` storage, a file for manual
requests) and one real subtask runtime (sequence source, keyed running sum, files sink,
uploader, real sockets) stand for the driver and its barrier stage. The supervisor asks
for the suspend checkpoint as it does on ``spec.suspend``; the stage ending is what the
driver reports as its end, after which its process exits. A second attempt then
restores the checkpoint the store holds and runs the job to its end.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from paths import JOBS
from runtime_harness import load_example, read_output

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import CheckpointMetadata
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from cjob_checkpoint.store.triggers import FileTriggerSource, request_checkpoint
from cjob_spec.model import CheckpointMode
from cjob_spec.names import suspend_nonce
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import ChannelAddress
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.subtask.runtime import SubtaskRuntime
from job_runtime.network.handshake import new_key

JOB = "suspend-uid1"
COUNT = 6000
"""Records of the job; at ``RATE`` the first attempt would take far longer than its suspend."""
RATE = 500.0
SPLITS = 8
"""The sequence source's splits (its default)."""
WAIT = 30.0


class Attempt:
    """One attempt's coordinator and its one subtask, over the job's shared store."""

    def __init__(self, tmp_path: Path, *, attempt: int, store: InMemoryCheckpointStore,
                 rate: float | None) -> None:
        self.storage = CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB)
        self.requests = tmp_path / "requests"
        self.requests.mkdir(exist_ok=True)
        latest = store.latest()
        restore = (None if latest is None else
                   CheckpointMetadata.from_bytes(self.storage.read_metadata(latest.metadata_path)))
        counter = InMemoryCheckpointIdCounter()
        if latest is not None:
            counter.set_count(latest.checkpoint_id + 1)
        key = new_key()
        self.coordinator = CheckpointCoordinator(
            job_id=JOB, attempt=attempt, parallelism=1, max_parallelism=128, stages=2,
            storage=self.storage, store=store, counter=counter,
            settings=CheckpointSettings(interval=0.3, tolerable_failures=0,
                                        trigger_poll_interval=0.1),
            initial_restore=restore, initial_restore_pointer=latest, key=key,
            triggers=FileTriggerSource(str(self.requests)))
        listener = socket.create_server(("127.0.0.1", 0))
        args: dict[str, Any] = {"count": COUNT, "output": str(tmp_path / "out")}
        if rate is not None:
            args["rate"] = rate
        config = SubtaskConfig(
            job_id=JOB, job_name="suspend", entrypoint="crashing_jobs:running_sum",
            python_path=(str(JOBS),), args=args, parallelism=1, max_parallelism=128,
            coordinator_host="127.0.0.1", coordinator_port=self.coordinator.port,
            checkpoint_root=(tmp_path / "ckpt").as_uri(),
            staging_uri=(tmp_path / "staging").as_uri(), mode=CheckpointMode.EXACTLY_ONCE, unaligned=False,
            key=key, loopback=True)
        self.runtime = SubtaskRuntime(config=config, subtask=0, epoch=1,
                                      listener=listener, channel=ChannelAddress(
                                          host="127.0.0.1", port=listener.getsockname()[1]))
        self.thread = threading.Thread(target=self.runtime.run, daemon=True,
                                       name=f"subtask-attempt-{attempt}")
        self.thread.start()

    def wait_for_end(self) -> None:
        """Until the stage ended (what the driver reports as the job's end, then exits)."""
        deadline = time.monotonic() + WAIT
        while not self.coordinator.finished.wait(0.05):
            assert self.coordinator.failure is None, self.coordinator.failure
            assert self.runtime.failure is None, self.runtime.failure
            assert time.monotonic() < deadline, "the attempt did not end"

    def stop(self) -> None:
        self.runtime.cancelled.set()
        self.coordinator.stop()
        self.thread.join(timeout=WAIT)


def records_read(metadata: CheckpointMetadata) -> int:
    """How many records the checkpoint's source positions are past (the sequence's
    eight splits are contiguous ranges; an unopened split has no position)."""
    bounds = [COUNT * i // SPLITS for i in range(SPLITS + 1)]
    read = 0
    for split in range(SPLITS):
        position = metadata.source_position(split)
        if position is not None:
            read += int(str(position)) - bounds[split]
    return read


def problems(output: Path, *, count: int) -> list[str]:
    """What the running-sum verifier finds wrong with the committed output."""
    verify = load_example("examples/running_sum/verify.py")
    found: list[str] = verify.verify(read_output(output), count=count)
    return found


def test_a_suspended_attempt_commits_its_last_checkpoint_before_it_ends_and_resumes_exactly_once(
        tmp_path: Path) -> None:
    store = InMemoryCheckpointStore(retained=3)
    first = Attempt(tmp_path, attempt=1, store=store, rate=RATE)
    try:
        deadline = time.monotonic() + WAIT
        while first.coordinator.stats.completed < 2:
            assert first.coordinator.failure is None, first.coordinator.failure
            assert time.monotonic() < deadline, "no checkpoint completed"
            time.sleep(0.02)
        request_checkpoint(str(first.requests), nonce=suspend_nonce(1))
        first.wait_for_end()
        # What the supervisor sees once the driver is gone: the store's latest
        # checkpoint, which the next attempt restores, and the visible output.
        latest = store.latest()
        assert latest is not None
        served = FileTriggerSource(str(first.requests)).acknowledged()
        assert served == suspend_nonce(1), "the suspend request was not served"
        metadata = CheckpointMetadata.from_bytes(
            first.storage.read_metadata(latest.metadata_path))
        read = records_read(metadata)
        assert read < COUNT, (
            f"the attempt ran on to the end of its input instead of stopping at the suspend "
            f"checkpoint (latest checkpoint {latest.checkpoint_id})")
        # Everything up to the suspend checkpoint is committed, nothing after it.
        committed = read_output(tmp_path / "out")
        assert len(committed) == read, (
            f"{len(committed)} records committed when the attempt ended, but its last "
            f"checkpoint {latest.checkpoint_id} holds {read} records read: the suspend "
            f"checkpoint's output would become visible only when the job resumes")
    finally:
        first.stop()

    second = Attempt(tmp_path, attempt=2, store=store, rate=None)
    try:
        second.wait_for_end()
    finally:
        second.stop()
    assert problems(tmp_path / "out", count=COUNT) == []
