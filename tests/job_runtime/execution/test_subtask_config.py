"""What a subtask's settings show when printed: never the secrets they carry.

A ``SubtaskConfig`` travels inside Spark's closure and turns up in logs, tracebacks
and Spark's task descriptions; its S3 credentials and its attempt key must not.
"""

from __future__ import annotations

import dataclasses
import pickle

from cjob_checkpoint.storage.s3 import S3Config
from cjob_spec.model import CheckpointMode
from job_runtime.execution.config import SubtaskConfig

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
KEY = b"attempt-key-0123456789abcdef"


def config() -> SubtaskConfig:
    s3 = S3Config(endpoint_url="http://s3:9000", access_key_id="AKIAEXAMPLE",
                  secret_access_key=SECRET, session_token="token-XYZ")
    return SubtaskConfig(
        job_id="clicks-uid", job_name="clicks", entrypoint="job:build", python_path=(),
        args={}, parallelism=2, max_parallelism=128, coordinator_host="10.0.0.1",
        coordinator_port=7000, checkpoint_root="s3://ckpt/clicks-uid",
        staging_uri="s3://ckpt/clicks-uid/staging", mode=CheckpointMode.EXACTLY_ONCE, unaligned=False,
        s3=dataclasses.asdict(s3), key=KEY)


def test_the_repr_shows_neither_the_s3_secret_nor_its_token_nor_the_attempt_key() -> None:
    text = repr(config())
    assert "clicks-uid" in text
    assert SECRET not in text
    assert "token-XYZ" not in text
    assert KEY.decode() not in text


def test_the_secret_still_reaches_the_subtask() -> None:
    shipped = pickle.loads(pickle.dumps(config()))
    assert shipped.s3 is not None and shipped.s3["secret_access_key"] == SECRET
    assert shipped.key == KEY
