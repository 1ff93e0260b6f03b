"""A job with ``spec.state.backend: rocksdb`` survives kills with exactly-once output.

Real Spark in local mode through the embedded runner (``cjob run``), the same
running-sum job and verifier as the hashmap recovery tests: a subtask process is
killed (Spark relaunches the stage, which restores within the attempt) and the
driver is killed after a commit (the next attempt restores from storage in a new
process). A second test kills a driver at parallelism 2 and resumes at 3, so
each new subtask copies its key groups out of the old subtasks' databases.
Sorted, every key's sums must step by exactly its inputs, each once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from runtime_harness import JOBS, EmbeddedRun, JobHarness, load_example, read_output

from cjob_checkpoint.checkpoint_storage import unframe_metadata
from cjob_checkpoint.metadata import CheckpointMetadata

COUNT = 8000
RATE = 1000


def test_a_rocksdb_job_killed_in_a_subtask_and_in_the_driver_recovers_exactly_once(
        tmp_path: Path, embedded: Callable[..., EmbeddedRun],
        job_yaml: Callable[..., Path]) -> None:
    """A subtask dies after snapshotting checkpoint 3 (Spark relaunches the stage, which
    restores an earlier one), then the driver dies once checkpoint 8 is committed (the
    next attempt restores 8 from storage). Fault points, not record counts, so the
    order is fixed: a kill by record could abort the checkpoint the driver fault waits
    for."""
    output = tmp_path / "output"
    job = job_yaml(tmp_path / "job.yaml", name="rocks", entrypoint="crashing_jobs:running_sum",
                   python_path=[str(JOBS)],
                   args={"count": COUNT, "rate": RATE, "output": str(output)})
    document = yaml.safe_load(job.read_text())
    document["spec"]["state"] = {"backend": "rocksdb"}
    job.write_text(yaml.safe_dump(document, sort_keys=False))
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    run = embedded(job, state_dir=tmp_path / "state", name="rocks",
                   env={"CJOB_FAULTS": "subtask.after-snapshot@3,driver.before-notify@8",
                        "CJOB_FAULTS_DIR": str(tmp_path), "SPARK_LOCAL_DIRS": str(scratch)})

    assert run.returncode == 0, run.explain()
    assert len(list(tmp_path.glob(".cjob-fault-*"))) == 2, "not every fault point fired"
    assert "subtasks restarted (stage attempt" in run.attempt_log(1)
    status = run.status
    assert status["phase"] == "Succeeded", status
    assert status["attempt"] == 2
    assert status["restoredFrom"]["id"] == 8
    verify = load_example("examples/running_sum/verify.py")
    assert verify.verify(read_output(output), count=COUNT) == []

    # The state really lived in RocksDB, in Spark's scratch directory (the block
    # manager's, which Spark hands its Python workers): the killed driver's one
    # was never cleaned up, and shows it.
    assert list(scratch.glob("blockmgr-*/cjob-rocksdb/*/db"))
    # The retained checkpoints reference shared table files, and every one exists.
    metadata_files = sorted(tmp_path.rglob("chk-*/_metadata"))
    assert metadata_files
    for path in metadata_files:
        metadata = CheckpointMetadata.from_bytes(unframe_metadata(path.read_bytes()))
        shared = metadata.shared_files()
        assert shared, f"{path} references no shared file"
        for uri in shared:
            assert Path(uri.removeprefix("file://")).is_file(), uri


def test_a_rocksdb_job_killed_at_parallelism_2_resumes_exactly_once_at_parallelism_3(
        harness: JobHarness) -> None:
    args = {"count": COUNT, "rate": RATE, "output": str(harness.output)}
    rocksdb = ["--state-backend", "rocksdb", "--state-dir", str(harness.base / "local")]
    killed = harness.run(entrypoint="crashing_jobs:running_sum", attempt=1, args=args,
                         env={"CJOB_FAULTS": "driver.before-metadata@4"}, extra=rocksdb)
    assert killed.returncode != 0, "the fault point never fired"

    run = harness.run(entrypoint="crashing_jobs:running_sum", attempt=2, args=args,
                      parallelism=3, master="local[3,4]",
                      extra=["--restore", "latest", *rocksdb])
    assert run.returncode == 0, run.explain()
    assert run.status is not None
    assert run.status["restoredFrom"]["id"] == 3
    assert harness.running_sum_problems(count=COUNT) == []
