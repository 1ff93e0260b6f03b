"""The Spark-tier tests of test_cli_job_code.py: they start a real driver."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runs import RUNNING_SUM, environment_without_s3_endpoint, run_cjob, write_job
from paths import REPO

from e2e.s3 import S3Bucket


def test_a_local_job_checkpoints_and_writes_to_the_s3_endpoint_its_spec_names(
        tmp_path: Path, s3_bucket: S3Bucket) -> None:
    """With only credentials in the environment, ``cjob run`` reaches the endpoint of
    ``spec.checkpoint.s3`` for its checkpoints and for the job's own S3 output, as the
    operator's driver pod does."""
    examples = REPO / "examples" / "running_sum"
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
