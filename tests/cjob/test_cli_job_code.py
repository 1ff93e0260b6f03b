"""``cjob run`` needs no image, and takes the job's code from an ``s3://`` zip the way
the driver pod does (the running job itself is in tests/job_runtime/spark/test_job_code_spark.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from cli_runs import (
    assert_one_line_error,
    environment_without_s3_endpoint,
    job_without_image,
    run_cjob,
)

from e2e.s3 import S3Bucket


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


