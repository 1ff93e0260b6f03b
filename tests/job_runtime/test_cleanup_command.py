"""``python -m job_runtime cleanup``: deletes exactly one job's checkpoint directory.

The command runs as a real process, as the operator's cleanup pod runs it, against a
local directory and a real S3 API (moto's server), with its S3 settings in the
environment exactly as a driver gets them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cjob_checkpoint.storage.local import LocalFileSystem
from cjob_spec.exit_codes import ExitCode
from e2e.s3 import FaultyS3, S3Bucket
from job_runtime.cleanup import CleanupIncompleteError, delete_job_directories

NAME = "clicks"
UID = "0b7c3e1a-5d2f-4e8a-9c61-2f4d7a8b9e10"
JOB_DIR = f"{NAME}-{UID}"


def cleanup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(
        [sys.executable, "-m", "job_runtime", "cleanup", *args],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=120, check=False,
    )


def job_args(uri: str, *extra: str) -> list[str]:
    return ["--uri", uri, "--job-name", NAME, "--job-uid", UID, *extra]


def fill(directory: Path) -> None:
    for relative in ("chk-1/_metadata", "chk-1/op/0", "chk-2/op/1"):
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


# --- file:// -------------------------------------------------------------------------


def test_it_deletes_the_jobs_directory_and_nothing_beside_it(tmp_path: Path) -> None:
    fill(tmp_path / JOB_DIR)
    fill(tmp_path / f"{JOB_DIR}-2")  # a name that merely starts like the job's
    fill(tmp_path / f"other-{UID}")
    done = cleanup(*job_args(f"file://{tmp_path}/{JOB_DIR}/"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"deleted 3 files under file://{tmp_path}/{JOB_DIR}"
    assert not (tmp_path / JOB_DIR).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{JOB_DIR}-2", f"other-{UID}"]


def test_running_it_again_when_nothing_is_left_succeeds(tmp_path: Path) -> None:
    done = cleanup(*job_args(f"file://{tmp_path}/{JOB_DIR}"))
    assert done.returncode == 0, done.stderr
    assert "nothing to delete" in done.stdout


def test_the_outcome_is_written_as_the_termination_message(tmp_path: Path) -> None:
    fill(tmp_path / JOB_DIR)
    log = tmp_path / "termination-log"
    log.write_text("")  # the kubelet creates the file; the command only fills it
    done = cleanup(*job_args(f"file://{tmp_path}/{JOB_DIR}", "--termination-log", str(log)))
    assert done.returncode == 0, done.stderr
    assert log.read_text() == f"deleted 3 files under file://{tmp_path}/{JOB_DIR}"


def test_no_termination_message_file_is_created_where_none_exists(tmp_path: Path) -> None:
    log = tmp_path / "absent"
    done = cleanup(*job_args(f"file://{tmp_path}/{JOB_DIR}", "--termination-log", str(log)))
    assert done.returncode == 0, done.stderr
    assert not log.exists()


@pytest.mark.parametrize(
    "uri",
    [
        "file://{root}",
        "file://{root}/other-" + UID,
        "file://{root}/" + JOB_DIR + "/chk-1",
        "file://{root}/../" + JOB_DIR,
        JOB_DIR,
        "s3://" + JOB_DIR,
        "hdfs://nn/" + JOB_DIR,
    ],
    ids=["storage-root", "other-job", "checkpoint-below", "dot-dot", "bare-name", "bucket-only",
         "unknown-scheme"],
)
def test_a_uri_that_is_not_the_jobs_directory_is_refused_and_nothing_is_touched(
    tmp_path: Path, uri: str
) -> None:
    fill(tmp_path / JOB_DIR)
    fill(tmp_path / f"other-{UID}")
    log = tmp_path / "termination-log"
    log.write_text("")
    done = cleanup(*job_args(uri.format(root=tmp_path), "--termination-log", str(log)))
    assert done.returncode == ExitCode.BAD_CONFIG, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert log.read_text() == done.stderr.strip()
    assert len([p for p in (tmp_path / JOB_DIR).rglob("*") if p.is_file()]) == 3
    assert len([p for p in (tmp_path / f"other-{UID}").rglob("*") if p.is_file()]) == 3


def test_missing_arguments_are_a_usage_error() -> None:
    done = cleanup("--uri", "file:///x/" + JOB_DIR)
    assert done.returncode == ExitCode.BAD_CONFIG
    assert "--job-name" in done.stderr


# --- s3:// ---------------------------------------------------------------------------


def test_it_deletes_the_jobs_s3_objects_with_the_drivers_environment(s3_bucket: S3Bucket) -> None:
    keys = [f"ckpt/{JOB_DIR}/chk-1/_metadata", f"ckpt/{JOB_DIR}/chk-1/op/0",
            f"ckpt/{JOB_DIR}-2/chk-1/_metadata", f"ckpt/other-{UID}/chk-1/_metadata"]
    for key in keys:
        s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=b"x")
    env = {
        "AWS_ACCESS_KEY_ID": s3_bucket.s3_config.access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": s3_bucket.s3_config.secret_access_key or "",
        "AWS_ENDPOINT_URL": s3_bucket.endpoint_url,
        "AWS_REGION": "us-east-1",
    }
    done = cleanup(*job_args(f"s3://{s3_bucket.bucket}/ckpt/{JOB_DIR}"), env=env)
    assert done.returncode == 0, done.stderr
    assert "deleted 2 files" in done.stdout
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.bucket).get("Contents", [])
    assert sorted(item["Key"] for item in listed) == keys[2:]
    again = cleanup(*job_args(f"s3://{s3_bucket.bucket}/ckpt/{JOB_DIR}"), env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to delete" in again.stdout


def test_storage_that_refuses_the_deletion_keeps_the_data_and_says_so_in_one_line(
    s3_faults: FaultyS3, tmp_path: Path
) -> None:
    key = f"ckpt/{JOB_DIR}/chk-1/_metadata"
    s3_faults.bucket.client.put_object(Bucket=s3_faults.bucket.bucket, Key=key, Body=b"x")
    s3_faults.proxy.fail_with(403, "AccessDenied")
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {"AWS_ACCESS_KEY_ID": "wrong", "AWS_SECRET_ACCESS_KEY": "wrong",
           "AWS_ENDPOINT_URL": s3_faults.endpoint_url, "AWS_REGION": "us-east-1"}
    done = cleanup(*job_args(f"s3://{s3_faults.bucket.bucket}/ckpt/{JOB_DIR}",
                             "--termination-log", str(log)), env=env)
    assert done.returncode == ExitCode.CLEANUP_FAILED, done
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("checkpoint data kept: "), line
    assert "Traceback" not in done.stderr
    assert log.read_text() == line
    s3_faults.proxy.pass_through()
    listed = s3_faults.bucket.client.list_objects_v2(Bucket=s3_faults.bucket.bucket)
    assert [item["Key"] for item in listed.get("Contents", [])] == [key]


# --- every root, unfinished uploads, and data that outlives the deletion ---------------


def test_it_deletes_every_root_the_job_used_and_counts_them_together(tmp_path: Path) -> None:
    fill(tmp_path / "old" / JOB_DIR)
    fill(tmp_path / "new" / JOB_DIR)
    fill(tmp_path / "new" / f"other-{UID}")
    done = cleanup("--uri", f"file://{tmp_path}/old/{JOB_DIR}",
                   *job_args(f"file://{tmp_path}/new/{JOB_DIR}"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        f"deleted 6 files under file://{tmp_path}/old/{JOB_DIR}, file://{tmp_path}/new/{JOB_DIR}")
    assert not (tmp_path / "old" / JOB_DIR).exists()
    assert not (tmp_path / "new" / JOB_DIR).exists()
    assert (tmp_path / "new" / f"other-{UID}").exists()


def test_one_refused_root_refuses_them_all_before_anything_is_deleted(tmp_path: Path) -> None:
    fill(tmp_path / JOB_DIR)
    done = cleanup("--uri", f"file://{tmp_path}/other-{UID}",
                   *job_args(f"file://{tmp_path}/{JOB_DIR}"))
    assert done.returncode == ExitCode.BAD_CONFIG, done
    assert len([p for p in (tmp_path / JOB_DIR).rglob("*") if p.is_file()]) == 3


def _s3_env(bucket: S3Bucket) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": bucket.s3_config.access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": bucket.s3_config.secret_access_key or "",
        "AWS_ENDPOINT_URL": bucket.endpoint_url,
        "AWS_REGION": "us-east-1",
    }


def test_an_upload_left_unfinished_under_the_jobs_directory_is_aborted(
    s3_bucket: S3Bucket,
) -> None:
    client, name = s3_bucket.client, s3_bucket.bucket
    client.put_object(Bucket=name, Key=f"ckpt/{JOB_DIR}/chk-1/_metadata", Body=b"x")
    mine = client.create_multipart_upload(Bucket=name, Key=f"ckpt/{JOB_DIR}/chk-2/op/0")
    client.upload_part(Bucket=name, Key=f"ckpt/{JOB_DIR}/chk-2/op/0", PartNumber=1,
                       UploadId=mine["UploadId"], Body=b"y" * 1024)
    theirs = client.create_multipart_upload(Bucket=name, Key=f"ckpt/other-{UID}/chk-1/op/0")
    done = cleanup(*job_args(f"s3://{name}/ckpt/{JOB_DIR}"), env=_s3_env(s3_bucket))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        f"deleted 1 files and aborted 1 unfinished uploads under s3://{name}/ckpt/{JOB_DIR}")
    left = client.list_multipart_uploads(Bucket=name).get("Uploads", [])
    assert [upload["UploadId"] for upload in left] == [theirs["UploadId"]]
    client.abort_multipart_upload(Bucket=name, Key=f"ckpt/other-{UID}/chk-1/op/0",
                                  UploadId=theirs["UploadId"])


class _LateWriter(LocalFileSystem):
    """A directory that an executor still writes into while the cleanup deletes it."""

    def __init__(self, *, late: Path) -> None:
        super().__init__()
        self.late = late

    def delete_prefix(self, uri: str) -> None:
        super().delete_prefix(uri)
        self.late.parent.mkdir(parents=True, exist_ok=True)
        self.late.write_bytes(b"late")


def test_data_written_while_the_cleanup_deletes_is_found_and_reported_kept(
    tmp_path: Path,
) -> None:
    fill(tmp_path / JOB_DIR)
    uri = f"file://{tmp_path}/{JOB_DIR}"
    fs = _LateWriter(late=tmp_path / JOB_DIR / "chk-3" / "op" / "0")
    with pytest.raises(CleanupIncompleteError) as raised:
        delete_job_directories([uri], fs_for=lambda _uri: fs)
    assert str(raised.value) == f"1 files remain under {uri} after the deletion"
    assert (tmp_path / JOB_DIR / "chk-3" / "op" / "0").exists()
