"""``cjob run`` needs no image, and takes the job's code from an ``s3://`` zip the way
the driver pod does (the running job itself is in tests/runtime/test_job_code_spark.py)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from e2e.s3 import S3Bucket
from tests.cli.test_cli_bad_input import assert_one_line_error, run_cjob, write_job

WITHOUT_IMAGE = """\
    apiVersion: checkpointed.io/v1alpha1
    kind: CheckpointedJob
    metadata:
      name: demo
    spec:
      job:
        entrypoint: job:build
        pythonPath: [{python_path}]
      spark: {{master: "local[1]"}}
      checkpoint:
        storage: file:///var/lib/cjob/checkpoints
        {s3}
      restartPolicy: {{type: OnFailure, maxRestarts: 2, backoff: {{initial: 1s}}}}
"""


def job_without_image(tmp_path: Path, *, python_path: str, s3: str = "") -> Path:
    return write_job(tmp_path / "job.yaml",
                     WITHOUT_IMAGE.format(python_path=python_path, s3=s3))


def environment_without_s3_endpoint(bucket: S3Bucket) -> dict[str, str]:
    """Credentials only: the endpoint must come from the job's spec.checkpoint.s3."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_ACCESS_KEY_ID"] = bucket.s3_config.access_key_id or ""
    env["AWS_SECRET_ACCESS_KEY"] = bucket.s3_config.secret_access_key or ""
    return env


def test_a_job_without_an_image_validates(tmp_path: Path) -> None:
    path = job_without_image(tmp_path, python_path=".")
    assert "image" not in path.read_text()
    result = run_cjob("validate", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout


def test_a_job_without_an_image_runs_its_driver(tmp_path: Path) -> None:
    """The driver starts and imports the job; the failure is the job's own, not the image."""
    (tmp_path / "job.py").write_text("raise RuntimeError('the job module itself ran')\n")
    path = job_without_image(tmp_path, python_path=".")
    result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert result.returncode == 1
    assert "the job module itself ran" in (tmp_path / "s" / "demo" / "attempt-1.log").read_text()
    assert "image" not in result.stderr


def test_an_s3_url_that_is_not_a_zip_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = job_without_image(tmp_path, python_path="s3://code/jobs/")
    result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert_one_line_error(result, "spec.job.pythonPath[0]", "zip archive")
    assert not (tmp_path / "s" / "demo").exists()


@pytest.mark.s3
def test_a_missing_s3_archive_fails_the_job_at_once_with_one_line(
        tmp_path: Path, s3_bucket: S3Bucket) -> None:
    uri = f"{s3_bucket.uri}/code/missing.zip"
    s3 = textwrap.dedent(f"""\
        s3: {{endpoint: "{s3_bucket.endpoint_url}", region: us-east-1}}""")
    path = job_without_image(tmp_path, python_path=uri, s3=s3)

    result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path,
                      env=environment_without_s3_endpoint(s3_bucket))

    assert_one_line_error(result, f"job code {uri}: no such object")
    status = json.loads((tmp_path / "s" / "demo" / "status.json").read_text())
    assert (status["phase"], status["restarts"]) == ("Failed", 0)
    assert status["lastFailure"]["exitCode"] == 2
    assert status["lastFailure"]["reason"] == "InvalidConfiguration"
    assert "Traceback" not in (tmp_path / "s" / "demo" / "attempt-1.log").read_text()


RUNNING_SUM = """\
    apiVersion: checkpointed.io/v1alpha1
    kind: CheckpointedJob
    metadata:
      name: s3-sum
    spec:
      job:
        entrypoint: job:build
        pythonPath: [{code}]
        args: {{output: "{output}", count: 3000}}
      parallelism: 1
      spark: {{master: "local[1]"}}
      checkpoint:
        storage: {storage}
        s3: {{endpoint: "{endpoint}", region: us-east-1}}
        interval: 1s
      restartPolicy: {{type: Never}}
"""


@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.slow
def test_a_local_job_checkpoints_and_writes_to_the_s3_endpoint_its_spec_names(
        tmp_path: Path, s3_bucket: S3Bucket) -> None:
    """With only credentials in the environment, ``cjob run`` reaches the endpoint of
    ``spec.checkpoint.s3`` for its checkpoints and for the job's own S3 output, as the
    operator's driver pod does."""
    examples = Path(__file__).resolve().parents[2] / "examples" / "running_sum"
    path = write_job(tmp_path / "job.yaml", RUNNING_SUM.format(
        code=examples, output=f"{s3_bucket.uri}/output", storage=f"{s3_bucket.uri}/ckpt",
        endpoint=s3_bucket.endpoint_url))  # fmt: skip

    result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path,
                      env=environment_without_s3_endpoint(s3_bucket))

    assert result.returncode == 0, result.stderr
    keys = [o["Key"] for page in s3_bucket.client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_bucket.bucket) for o in page.get("Contents", [])]  # fmt: skip
    assert any(k.startswith("ckpt/") and k.endswith("/_metadata") for k in keys), keys
    outputs = [k for k in keys if k.startswith("output/part-")]
    records = [json.loads(line) for k in outputs for line in s3_bucket.client.get_object(
        Bucket=s3_bucket.bucket, Key=k)["Body"].read().decode().splitlines() if line]  # fmt: skip
    assert len(records) == 3000
