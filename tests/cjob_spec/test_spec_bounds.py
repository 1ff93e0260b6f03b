"""Values that are well-formed but absurd are refused by the parser, with one line.

A duration of 99999999999h or a ``maxRestarts`` of 10^30 used to pass validation and
crash (or hang) later, far from the document: in date arithmetic, in the backoff
loop, in the status written back. The CRD carries the same bounds (see
``test_crd_api_server.py``), so the API server and the parser refuse the same things.
"""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import minimal, with_field

from cjob_spec import SpecError, parse_job
from cjob_spec.durations import MAX_DURATION

S3_JOB = with_field(minimal(), "spec.checkpoint.storage", "s3://ckpt/jobs")

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("huge interval", with_field(minimal(), "spec.checkpoint.interval", "99999999999h"),
     "spec.checkpoint.interval: must be at most 8760h"),
    ("exponent interval", with_field(minimal(), "spec.checkpoint.interval", "1e400s"),
     "spec.checkpoint.interval: must be a duration"),
    ("hundreds of digits", with_field(minimal(), "spec.checkpoint.timeout", "9" * 400 + "s"),
     "spec.checkpoint.timeout: must be at most 8760h"),
    ("huge min pause", with_field(minimal(), "spec.checkpoint.minPause", "8761h"),
     "spec.checkpoint.minPause: must be at most 8760h"),
    ("huge backoff", with_field(minimal(), "spec.restartPolicy.backoff",
                                {"initial": "1s", "max": "99999999999h"}),
     "spec.restartPolicy.backoff.max: must be at most 8760h"),
    ("huge reset window", with_field(minimal(), "spec.restartPolicy.resetAfter", "10000000h"),
     "spec.restartPolicy.resetAfter: must be at most 8760h"),
    ("huge start timeout", with_field(minimal(), "spec.restartPolicy.startTimeout", "9999999h"),
     "spec.restartPolicy.startTimeout: must be at most 8760h"),
    ("maxRestarts 10^30", with_field(minimal(), "spec.restartPolicy.maxRestarts", 10**30),
     "spec.restartPolicy.maxRestarts: must be <= 10000"),
    ("tolerableFailures 10^30", with_field(minimal(), "spec.checkpoint.tolerableFailures",
                                           10**30),
     "spec.checkpoint.tolerableFailures: must be <= 10000"),
    ("backoff multiplier 1e300", with_field(minimal(), "spec.restartPolicy.backoff.multiplier",
                                            1e300),
     "spec.restartPolicy.backoff.multiplier: must be <= 100"),
    ("credentials in the endpoint",
     with_field(S3_JOB, "spec.checkpoint.s3", {"endpoint": "https://AKIA:s3cr3t@minio:9000"}),
     "spec.checkpoint.s3.endpoint: must not contain credentials"),
]


@pytest.mark.parametrize(("document", "message"),
                         [pytest.param(d, m, id=name) for name, d, m in REFUSED])
def test_the_parser_refuses_out_of_bounds_values_with_one_line(
        document: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_an_endpoint_with_credentials_is_refused_without_repeating_them() -> None:
    document = with_field(S3_JOB, "spec.checkpoint.s3",
                          {"endpoint": "https://AKIA:s3cr3t@minio:9000"})
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    assert "s3cr3t" not in str(caught.value)
    assert "AKIA" not in str(caught.value)


@pytest.mark.parametrize(("path", "value"), [
    ("spec.checkpoint.interval", "8760h"),
    ("spec.checkpoint.timeout", "525600m"),
    ("spec.restartPolicy.maxRestarts", 10000),
    ("spec.checkpoint.tolerableFailures", 10000),
    ("spec.restartPolicy.backoff", {"initial": "1s", "max": "8760h", "multiplier": 100}),
])
def test_the_parser_accepts_values_at_the_bounds(path: str, value: Any) -> None:
    parse_job(with_field(minimal(), path, value))


def test_the_duration_bound_is_one_year() -> None:
    assert MAX_DURATION.text == "8760h"
    assert MAX_DURATION.seconds == 365 * 24 * 3600
