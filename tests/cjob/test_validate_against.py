"""``cjob validate JOB --against CHECKPOINT``: the restore's state check, run before
any driver: the job's code is loaded from its local ``pythonPath``, and the answer is
one line per operator whose state the pipeline no longer maps, with the exit code a
restore would end with.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runtime_harness import runtime_env, write_job_yaml

from cjob_checkpoint.checkpoint_storage import CheckpointStorage, StateHandle
from cjob_checkpoint.metadata import CheckpointMetadata, KeyedStateHandle, OperatorDescriptor
from cjob_spec.exit_codes import ExitCode

JOB_CODE = '''
from job_runtime import sinks, sources


def build(p):
    (p.source(sources.sequence(count=10)).map(lambda r: {"key": r["seq"] % 3, "v": 1})
     .key_by("key").reduce(lambda a, b: a, name=p.args["reduce"]).sink(sinks.discard()))
'''


def checkpoint_of(tmp_path: Path, *, operator: str) -> str:
    """A checkpoint whose state is ``operator``'s, as a job wrote it: its _metadata path."""
    storage = CheckpointStorage((tmp_path / "ckpt").as_uri(), "sums-u1")
    metadata = CheckpointMetadata(
        job="sums-u1", checkpoint_id=3, timestamp=0.0, final=False, attempt=1, parallelism=1,
        max_parallelism=128,
        operators={operator: (KeyedStateHandle(subtask=0, handle=StateHandle(
            uri=storage.metadata_uri(3), size_bytes=1, crc32=0), key_groups=(0, 128)),)},
        pipeline=(OperatorDescriptor(uid=operator, kind="reduce", stage=1, key="key",
                                     state=""),))
    storage.write_metadata(3, metadata.to_bytes())
    return storage.metadata_uri(3)


def validate(tmp_path: Path, *, reduce: str, against: str,
             python_path: str = ".") -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(JOB_CODE)
    job = write_job_yaml(tmp_path / "job.yaml", name="sums", entrypoint="job:build",
                         python_path=[python_path], args={"reduce": reduce})
    return subprocess.run([sys.executable, "-m", "cjob", "validate", str(job),
                           "--against", against], capture_output=True, text=True,
                          env=runtime_env(), timeout=120, check=False)


def test_a_checkpoint_whose_state_fits_says_so_and_exits_0(tmp_path: Path) -> None:
    run = validate(tmp_path, reduce="total", against=checkpoint_of(tmp_path, operator="total"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fits the pipeline: state of 1 operator(s) restores (total)" in run.stdout


def test_a_renamed_operator_is_named_and_the_exit_code_is_a_refused_restores(
        tmp_path: Path) -> None:
    run = validate(tmp_path, reduce="sum", against=checkpoint_of(tmp_path, operator="total"))
    assert run.returncode == ExitCode.INCOMPATIBLE_STATE, run.stdout + run.stderr
    assert "does not fit the pipeline" in run.stdout
    assert ("operator 'total' (reduce) holds state, but the job has no operator of that name "
            "(its stateful operators: 'sum')") in run.stdout
    assert "Traceback" not in run.stdout + run.stderr


def test_a_checkpoint_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    missing = (tmp_path / "ckpt" / "sums-u1" / "chk-9" / "_metadata").as_uri()
    run = validate(tmp_path, reduce="sum", against=missing)
    assert run.returncode == ExitCode.RESTORE_FAILED, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("error: cannot read the checkpoint")
    assert "Traceback" not in run.stdout + run.stderr


def test_job_code_in_an_s3_archive_is_refused_in_one_line(tmp_path: Path) -> None:
    run = validate(tmp_path, reduce="sum", against=checkpoint_of(tmp_path, operator="total"),
                   python_path="s3://code/job.zip")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "cjob: error: --against loads the job's code locally; its pythonPath names "
        "s3://code/job.zip, an S3 archive"]


def test_latest_is_the_local_jobs_latest_retained_checkpoint(tmp_path: Path) -> None:
    from runtime_harness import write_completed_checkpoints

    from cjob_checkpoint.store.file import FileCheckpointStore, advance_attempt

    state = tmp_path / "state"
    advance_attempt(str(state / "sums" / "store"), 1)
    write_completed_checkpoints(
        CheckpointStorage((state / "sums" / "checkpoints").as_uri(), "sums-u1"),
        FileCheckpointStore(str(state / "sums" / "store"), retained=3, attempt=1), [1, 2],
        job="sums-u1")
    (tmp_path / "job.py").write_text(JOB_CODE)
    job = write_job_yaml(tmp_path / "job.yaml", name="sums", entrypoint="job:build",
                         python_path=["."], args={"reduce": "total"})
    command = [sys.executable, "-m", "cjob", "validate", str(job), "--against", "latest",
               "--state-dir", str(state)]
    run = subprocess.run(command, capture_output=True, text=True, env=runtime_env(),
                         timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "checkpoint 2 of job sums-u1 fits the pipeline" in run.stdout
    missing = subprocess.run([*command[:-1], str(tmp_path / "nowhere")], capture_output=True,
                             text=True, env=runtime_env(), timeout=120, check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"cjob: error: job 'sums' has no retained checkpoint in {tmp_path / 'nowhere'} (run it "
        f"with cjob run first, or name a checkpoint)")
