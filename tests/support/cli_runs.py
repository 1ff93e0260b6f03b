"""Running ``cjob`` as a user does, and the job documents the CLI tests share."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from paths import REPO

from e2e.s3 import S3Bucket


def run_cjob(*args: str, cwd: Path, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m cjob ARGS``; ``env`` is the whole environment (default: this one's)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "operator"),
                                         env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "cjob", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_job(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("cjob: error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


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
