"""Thousands of checkpoints leave the memory of the driver and the subtasks flat.

An in-process coordinator (memory store, ``file://`` storage) and one real
subtask runtime (source, keyed task, files sink, uploader, real sockets) run a
steady job; the test triggers checkpoints back to back and measures, with
tracemalloc, the memory allocated by the runtime's own code that is still held
after a third of the checkpoints and after all of them. Bookkeeping kept per
checkpoint (barrier ids, manual requests, statistics, upload jobs) shows as
growth between the two.

What is in flight at the moment of a measurement (records in a channel, a sink
interval's spool) depends on how busy the machine is, so each measurement is
the floor over the last checkpoints of its phase, line by line: in-flight data
comes and goes (on different lines at different moments), a leak raises the floor. Each measurement follows a full garbage collection:
CPython keeps freed tuples, floats and dicts on free lists, and tracemalloc still
counts such a block against the line that first allocated it, so without the
collection the free lists filling up over thousands of checkpoints read as a leak
of whichever lines happened to allocate them (about 25 KB over 2,000 checkpoints,
attributed to the line building a progress report, with one such report alive).
"""

from __future__ import annotations

import gc
import socket
import threading
import time
import tracemalloc
from pathlib import Path

from paths import JOBS

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from cjob_spec.model import CheckpointMode
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import ChannelAddress
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.subtask.runtime import SubtaskRuntime
from job_runtime.execution.subtask.source_task import SourceTask
from job_runtime.network.handshake import new_key

JOB = "long-run-uid1"
CHECKPOINTS = 3000
SAMPLES = 10
"""Checkpoints at the end of each phase whose held memory is sampled for the floor."""
WAIT = 30.0
LEAK_BYTES_PER_CHECKPOINT = 12
"""Growth per checkpoint between the two measurements that fails the test. Whatever is
kept per checkpoint costs more than this (an id in a set or a list is 36 bytes or
more), so 2,000 checkpoints of it show; one batch of rows that stayed in flight at
every sample of the last phase (seen on a machine busy building: 13 KB on the line
that turns a batch into rows) does not fail the run."""


def held_by_runtime() -> tracemalloc.Snapshot:
    """What lines of ``job_runtime`` still hold, free lists emptied first."""
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*/job_runtime/*")])


Floor = dict[str, int]
"""Bytes held per line of the runtime, each line's least over a phase's samples."""


def held_per_line(snapshot: tracemalloc.Snapshot) -> Floor:
    return {str(stat.traceback): stat.size for stat in snapshot.statistics("lineno")}


def lower(floor: Floor | None, held: Floor) -> Floor:
    """Each line's least: in-flight data of different lines peaks at different times."""
    if floor is None:
        return held
    return {line: min(size, held[line]) for line, size in floor.items() if line in held}


def grown_lines(before: Floor, after: Floor) -> str:
    """The lines whose held memory grew most between two floors: where a leak is."""
    growth = sorted(((size - before.get(line, 0), line) for line, size in after.items()),
                    reverse=True)
    return "; ".join(f"{line} +{grown} B" for grown, line in growth[:5] if grown > 0)


def checkpoint_once(coordinator: CheckpointCoordinator) -> None:
    done = coordinator.stats.completed
    deadline = time.monotonic() + WAIT
    while coordinator.trigger() is None:
        assert time.monotonic() < deadline, "no checkpoint could start"
        time.sleep(0.001)
    while coordinator.stats.completed == done:
        assert coordinator.failure is None, coordinator.failure
        assert time.monotonic() < deadline, "the checkpoint did not complete"
        time.sleep(0.0005)


def run_and_measure_floor(coordinator: CheckpointCoordinator, *,
                          checkpoints: int) -> Floor:
    """Complete ``checkpoints`` checkpoints; what each line held at least after the
    last :data:`SAMPLES` of them."""
    floor: Floor | None = None
    for done in range(1, checkpoints + 1):
        checkpoint_once(coordinator)
        if done > checkpoints - SAMPLES:
            floor = lower(floor, held_per_line(held_by_runtime()))
    assert floor is not None
    return floor


def test_thousands_of_checkpoints_leave_memory_flat(tmp_path: Path) -> None:
    storage = CheckpointStorage((tmp_path / "ckpt").as_uri(), JOB)
    key = new_key()
    coordinator = CheckpointCoordinator(
        job_id=JOB, attempt=1, parallelism=1, max_parallelism=128, stages=2, storage=storage,
        store=InMemoryCheckpointStore(retained=2), counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0, tolerable_failures=0),
        initial_restore=None, initial_restore_pointer=None, key=key)
    listener = socket.create_server(("127.0.0.1", 0))
    config = SubtaskConfig(
        job_id=JOB, job_name="long-run", entrypoint="long_run_job:build",
        python_path=(str(JOBS),), args={"output": str(tmp_path / "out"), "rate": 2000},
        parallelism=1, max_parallelism=128, coordinator_host="127.0.0.1",
        coordinator_port=coordinator.port, checkpoint_root=(tmp_path / "ckpt").as_uri(),
        staging_uri=(tmp_path / "staging").as_uri(), mode=CheckpointMode.EXACTLY_ONCE, unaligned=False,
        key=key, loopback=True)
    runtime = SubtaskRuntime(config=config, subtask=0, epoch=1,
                             listener=listener, channel=ChannelAddress(
                                 host="127.0.0.1", port=listener.getsockname()[1]))
    thread = threading.Thread(target=runtime.run, daemon=True, name="long-run-subtask")
    tracemalloc.start()
    try:
        thread.start()
        third = run_and_measure_floor(coordinator, checkpoints=CHECKPOINTS // 3)
        end = run_and_measure_floor(coordinator, checkpoints=CHECKPOINTS - CHECKPOINTS // 3)
    finally:
        tracemalloc.stop()
        runtime.cancelled.set()
        coordinator.stop()
        thread.join(timeout=WAIT)

    held_third, held_end = sum(third.values()), sum(end.values())
    print(f"runtime memory after {CHECKPOINTS // 3}: {held_third}, after {CHECKPOINTS}: "
          f"{held_end}")
    assert coordinator.stats.completed == CHECKPOINTS
    later = CHECKPOINTS - CHECKPOINTS // 3
    assert held_end - held_third < LEAK_BYTES_PER_CHECKPOINT * later, (
        f"runtime memory grew from {held_third} to {held_end} bytes over {later} "
        f"checkpoints: {grown_lines(third, end)}")
    source = next(t for t in runtime.tasks if isinstance(t, SourceTask))
    assert len(source.emitted_barriers) <= 1, "settled barrier ids are remembered"
    assert len(coordinator.stats.history) <= 100
    assert runtime.uploader.queued == 0
