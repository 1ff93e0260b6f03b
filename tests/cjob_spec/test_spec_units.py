"""Durations and memory quantities: the accepted syntax, and refusals."""

from __future__ import annotations

import re

import pytest

from cjob_spec import DurationFormatError, QuantityFormatError, format_seconds
from cjob_spec.durations import DURATION_PATTERN, parse_duration_seconds
from cjob_spec.quantities import format_kubernetes_memory, format_spark_memory, parse_memory_bytes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("10s", 10.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("2h45m30.5s", 9930.5),
        ("100us", 0.0001),
        ("100\u00b5s", 0.0001),
        ("10ns", 1e-8),
        ("1m1ms", 60.001),
    ],
)
def test_go_style_durations_are_understood(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == pytest.approx(seconds)
    assert re.match(DURATION_PATTERN, text), "the CRD's pattern must accept it too"


@pytest.mark.parametrize(
    "text", ["", "10", "s", "-1s", "+1s", ".5s", "1.s", "1d", "1h 30m", "ten s"]
)
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(DurationFormatError):
        parse_duration_seconds(text)
    assert not re.match(DURATION_PATTERN, text), "the CRD's pattern must refuse it too"


@pytest.mark.parametrize(
    ("seconds", "text"), [(10.0, "10"), (0.0, "0"), (0.25, "0.25"), (600.0, "600")]
)
def test_seconds_are_rendered_without_needless_decimals(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1", 1),
        ("1024", 1024),
        ("1Ki", 1024),
        ("1k", 1024),
        ("1K", 1000),
        ("3Mi", 3 * 1024**2),
        ("3m", 3 * 1024**2),
        ("3M", 3 * 10**6),
        ("2Gi", 2 * 1024**3),
        ("2gb", 2 * 1024**3),
        ("1Ti", 1024**4),
        ("0.5Gi", 512 * 1024**2),
        ("10b", 10),
    ],
)
def test_memory_quantities_are_understood(text: str, size: int) -> None:
    assert parse_memory_bytes(text) == size


@pytest.mark.parametrize("text", ["", "Gi", "2 GB", "2GB", "-1Gi", "1e3", "0", "0.0001"])
def test_malformed_memory_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityFormatError):
        parse_memory_bytes(text)


@pytest.mark.parametrize(
    ("size", "kubernetes", "spark"),
    [
        (2 * 1024**3, "2Gi", "2048m"),
        (1536 * 1024**2, "1536Mi", "1536m"),
        (1000, "1000", "1m"),
        (3 * 1024**2 + 1, str(3 * 1024**2 + 1), "4m"),
    ],
)
def test_memory_is_rendered_for_kubernetes_and_spark(
    size: int, kubernetes: str, spark: str
) -> None:
    assert format_kubernetes_memory(size) == kubernetes
    assert format_spark_memory(size) == spark
