"""``spec.autoscaler``: its defaults, and bounds that contradict each other or the job's
key groups refused in one line."""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import minimal, with_field

from cjob_spec import SpecError, parse_job, spec_hash
from cjob_spec.model import AutoscalerMode


def with_autoscaler(section: dict[str, Any], **spec: Any) -> Any:
    document = with_field(minimal(), "spec.autoscaler", section)
    for key, value in spec.items():
        document = with_field(document, f"spec.{key}", value)
    return parse_job(document)


def test_by_default_it_is_off_and_bounded_by_the_key_groups() -> None:
    autoscaler = parse_job(minimal()).spec.autoscaler
    assert autoscaler.mode is AutoscalerMode.OFF and not autoscaler.enabled
    assert (autoscaler.min, autoscaler.upper(128)) == (1, 128)
    assert autoscaler.target_lag.seconds == 60 and autoscaler.stabilization.seconds == 300
    assert autoscaler.target_utilization == 0.7


def test_its_settings_are_read_and_leave_the_spec_hash_alone() -> None:
    job = with_autoscaler({"mode": "Apply", "min": 2, "max": 8, "targetLag": "30s",
                           "targetUtilization": 0.6, "stabilization": "1m"})
    autoscaler = job.spec.autoscaler
    assert (autoscaler.mode, autoscaler.min, autoscaler.upper(128)) == (
        AutoscalerMode.APPLY, 2, 8)
    assert spec_hash(job) == spec_hash(parse_job(minimal()))


@pytest.mark.parametrize(("section", "field", "problem"), [
    ({"min": 9, "max": 4}, "spec.autoscaler.min", "must be <= max (4), got 9"),
    ({"max": 256}, "spec.autoscaler.max", "must be <= maxParallelism (128), got 256"),
    ({"min": 200}, "spec.autoscaler.min", "must be <= maxParallelism (128), got 200"),
    ({"mode": "Always"}, "spec.autoscaler.mode", "Apply"),
    ({"targetUtilization": 0}, "spec.autoscaler.targetUtilization", ">= 0.1"),
    ({"targetLag": "0s"}, "spec.autoscaler.targetLag", ""),
    ({"minimum": 2}, "spec.autoscaler.minimum", "unknown field"),
])
def test_bounds_that_cannot_hold_are_refused_naming_the_field(
        section: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        with_autoscaler(section)
    assert caught.value.field == field
    assert problem in str(caught.value)
