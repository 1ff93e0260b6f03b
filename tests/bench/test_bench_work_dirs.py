"""A benchmark's scratch space: a killed run's leftovers go, and a run that cannot fit
on the disk says so before it starts instead of failing half-way with ENOSPC."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import common


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.pid


@pytest.fixture()
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(common, "WORK", tmp_path)
    return tmp_path


def test_a_new_run_removes_the_work_of_a_killed_run_of_any_benchmark(work: Path) -> None:
    killed = work / f"{common.RUN_PREFIX}{_dead_pid()}-rocksdb-state-abc123"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "000001.sst").write_bytes(b"x" * 1024)

    mine = common.fresh_dir("ss-rocksdb-state")

    assert not killed.exists()
    assert mine.is_dir() and mine.parent == work


def test_a_new_run_keeps_the_work_of_runs_still_running(work: Path) -> None:
    first = common.fresh_dir("throughput")
    (first / "data").write_text("in use")

    second = common.fresh_dir("throughput")

    assert (first / "data").read_text() == "in use"
    assert second != first and second.is_dir()


def test_a_run_that_needs_more_disk_than_is_free_is_refused_with_the_numbers(
        work: Path) -> None:
    free = common.free_bytes(work)

    with pytest.raises(common.BenchmarkError) as caught:
        common.require_free_space(benchmark="ss-rocksdb-state", directory=work,
                                  needed=free + 10 * 2**30, what="5.0 GiB of state")

    message = str(caught.value)
    assert "ss-rocksdb-state" in message and str(work) in message
    assert "GiB free" in message and "5.0 GiB of state" in message


def test_a_run_that_fits_on_the_disk_is_not_refused(work: Path) -> None:
    common.require_free_space(benchmark="rocksdb-state", directory=work, needed=1024,
                              what="1 KiB")


def test_the_state_benchmarks_ask_for_room_for_their_state_several_times_over() -> None:
    from bench import rocksdb_state, ss_rocksdb_state

    five = 5 * 2**30
    # Measured at 5 GiB: ours held 20 GB (database, checkpoints, restore), Structured
    # Streaming 45.5 GB at its peak (checkpoint directory, two working copies).
    assert rocksdb_state.disk_needed(state_bytes=five) >= 20e9
    assert ss_rocksdb_state.disk_needed(state_bytes=five) >= 45.5e9
