"""Timestamps in the form Kubernetes uses for ``metav1.Time``: RFC 3339, UTC, seconds.

Everything in this package takes the current time as a parameter instead of reading a
clock, so decisions are reproducible in tests; these helpers only convert.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """``2024-05-01T12:00:00Z``; naive datetimes are taken to be UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (``Z`` or an offset, optional fraction) into UTC."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def to_utc(moment: datetime) -> datetime:
    """Make ``moment`` timezone-aware in UTC (naive values are taken to be UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def truncate_to_seconds(moment: datetime) -> datetime:
    """Kubernetes stores times with whole seconds; compare like with like."""
    return to_utc(moment).replace(microsecond=0)
