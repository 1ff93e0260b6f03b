"""Durations in the user API: ``"5s"``, ``"1m"``, ``"250ms"`` or a number of seconds.

The same syntax as the CheckpointedJob spec (Go's, :mod:`cjob_spec.durations`), so a
job and its resource read alike; a bare number is seconds, as Python code writes it.
Event time counts in whole milliseconds, so a duration becomes milliseconds here.
"""

from __future__ import annotations

from cjob_spec.durations import parse_duration_seconds
from cjob_spec.errors import DurationFormatError
from job_runtime.errors import PipelineDefinitionError


def duration_ms(value: str | float, *, what: str, allow_zero: bool = True) -> int:
    """``value`` in whole milliseconds, or a one-line error naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PipelineDefinitionError(
            problem=f"{what} must be a duration like '5s', '1m' or '250ms' or a number of "
                    f"seconds, got {value!r}")
    if isinstance(value, str):
        try:
            seconds = parse_duration_seconds(value.strip())
        except DurationFormatError as exc:
            raise PipelineDefinitionError(problem=f"{what}: {exc}") from None
    else:
        seconds = float(value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise PipelineDefinitionError(
            problem=f"{what} must be {'at least zero' if allow_zero else 'positive'}, "
                    f"got {value!r}")
    ms = round(seconds * 1000)
    if ms == 0 and seconds > 0:
        raise PipelineDefinitionError(
            problem=f"{what} must be at least 1ms (event time counts milliseconds), "
                    f"got {value!r}")
    return int(ms)
