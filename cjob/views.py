"""How ``cjob`` and ``kubectl cjob`` print a job: one formatting for both.

A job run on one machine and a job run by the operator have the same status model and
the same checkpoint pointers, so the two commands print them alike: a user who learnt
one reads the other. Tables follow kubectl's conventions (upper-case headers, columns
separated by at least three spaces, ages as ``5m``/``3h12m``/``2d``, ``<none>`` for a
missing value in a listing); ``-o json`` and ``-o yaml`` print the underlying data
unchanged, for scripts.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from cjob_checkpoint.store.completed_store import CompletedCheckpoint


class Output(enum.StrEnum):
    """The ``-o`` formats every command takes."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OUTPUTS = [output.value for output in Output]
NONE = "<none>"
"""kubectl's word for an empty cell in a listing."""


def dump(data: Any, *, output: Output) -> str:
    """``data`` as JSON (indented, keys sorted) or YAML (block style, keys sorted)."""
    if output is Output.YAML:
        return yaml.safe_dump(data, sort_keys=True, default_flow_style=False).rstrip("\n")
    return json.dumps(data, indent=2, sort_keys=True)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns three spaces apart, kubectl's layout; ``None`` cells print as
    :data:`NONE`."""
    cells = [[str(h) for h in header]] + [[NONE if c is None else str(c) for c in row]
                                          for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in cells]
    return "\n".join(lines)


def fields(rows: Sequence[tuple[str, Any]]) -> str:
    """``Key:  value`` lines, keys padded to one width (``kubectl describe``'s layout)."""
    width = max(len(key) for key, _ in rows) + 1
    return "\n".join(f"{key + ':':<{width}}  {'-' if value is None else value}"
                     for key, value in rows)


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time of the API (``2026-11-30T15:30:00Z``, fractions allowed), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def age(since: datetime | None, *, now: datetime) -> str | None:
    """How long ago ``since`` was, as :func:`duration` says it; None when there is no
    time."""
    if since is None:
        return None
    return duration((now - since).total_seconds())


def duration(seconds_float: float) -> str:
    """kubectl's short duration: ``45s``, ``3m20s``, ``47m``, ``5h10m``, ``30h``,
    ``3d4h``, ``12d``, ``2y30d``."""
    seconds = max(0, int(seconds_float))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return _two_units(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _two_units(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return _two_units(days, "d", hours % 24, "h")
    if days < 730:
        return f"{days}d"
    return _two_units(days // 365, "y", days % 365, "d")


def _two_units(large: int, large_unit: str, small: int, small_unit: str) -> str:
    """``3h12m``, or ``3h`` when the smaller unit's count is zero."""
    return f"{large}{large_unit}{small}{small_unit}" if small else f"{large}{large_unit}"


def size(size_bytes: Any) -> str | None:
    """Bytes in binary units with one decimal (``12.3Mi``), kubectl's quantity suffixes."""
    if not isinstance(size_bytes, int | float):
        return None
    value = float(size_bytes)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if value < 1024 or unit == "Ti":
            return f"{int(value)}" if unit == "" else f"{value:.1f}{unit}"
        value /= 1024
    return None  # unreachable: the loop returns at "Ti"


def checkpoint_table(checkpoints: Sequence[CompletedCheckpoint], *, now: datetime) -> str:
    """A job's retained checkpoints, oldest first: what ``cjob checkpoints list`` and
    ``kubectl cjob checkpoints`` print."""
    rows = []
    for c in sorted(checkpoints, key=lambda c: c.checkpoint_id):
        completed = datetime.fromtimestamp(c.timestamp, UTC)
        rows.append((c.checkpoint_id, completed.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     age(completed, now=now), size(c.size_bytes), c.attempt,
                     c.metadata_path))
    return table(("ID", "COMPLETED", "AGE", "SIZE", "ATTEMPT", "PATH"), rows)


def checkpoint_data(checkpoints: Sequence[CompletedCheckpoint]) -> list[dict[str, Any]]:
    """The pointers as they are stored (``id``, ``path``, ``timestamp``, ``sizeBytes``,
    ``attempt``), oldest first, for ``-o json|yaml``."""
    return [json.loads(c.to_json()) for c in sorted(checkpoints,
                                                     key=lambda c: c.checkpoint_id)]


def status_fields(*, name: str, status: Mapping[str, Any], now: datetime,
                  namespace: str | None = None) -> str:
    """One job's status, the same lines locally and on a cluster (a cluster adds the
    namespace): phase and why, attempt, restarts, parallelism, the latest checkpoint with
    its age, size and path, what the attempt restored, the last failure."""
    latest = status.get("latestCheckpoint") or {}
    restored = status.get("restoredFrom") or {}
    failure = status.get("lastFailure") or {}
    completed = age(parse_time(latest.get("completedAt")), now=now)
    checkpoint = None
    if latest.get("id") is not None:
        details = ", ".join(part for part in (
            f"{completed} ago" if completed else "", size(latest.get("sizeBytes")) or "")
            if part)
        checkpoint = f"{latest['id']}" + (f" ({details})" if details else "")
    restored_text = None
    if restored:
        restored_text = (f"checkpoint {restored['id']}" if restored.get("id") is not None
                         else "nothing")
        if restored.get("path"):
            restored_text += f" ({restored['path']})"
    failure_text = None
    if failure:
        failure_text = f"{failure.get('reason')}: {failure.get('message')}"
        if failure.get("attempt") is not None:
            failure_text += f" (attempt {failure['attempt']})"
    reason = status.get("reason")
    phase = status.get("phase") or "-"
    rows: list[tuple[str, Any]] = [("Name", name)]
    if namespace is not None:
        rows.append(("Namespace", namespace))
    rows += [
        ("Phase", f"{phase} ({reason})" if reason and reason != phase else phase),
        ("Attempt", status.get("attempt", 0)),
        ("Restarts", status.get("restarts", 0)),
        ("Parallelism", status.get("parallelism")),
        ("Driver pod", status.get("driverPod")),
        ("Latest checkpoint", checkpoint),
        ("Checkpoint path", latest.get("path")),
        ("Restored from", restored_text),
        ("Last failure", failure_text),
        ("Message", status.get("message")),
    ]
    return fields(rows)


def conditions_table(conditions: Sequence[Mapping[str, Any]], *, now: datetime) -> str:
    rows = [(c.get("type"), c.get("status"), c.get("reason"),
             age(parse_time(c.get("lastTransitionTime")), now=now), c.get("message"))
            for c in conditions]
    return table(("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"), rows)


def events_table(events: Sequence[Mapping[str, Any]], *, now: datetime) -> str:
    """Events, oldest first, as ``kubectl events`` prints them."""
    rows = [(age(event_time(e), now=now), e.get("type"), e.get("reason"),
             e.get("message")) for e in events]
    return table(("LAST SEEN", "TYPE", "REASON", "MESSAGE"), rows)


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """When an Event last happened: its series, last timestamp, event time or creation."""
    series = event.get("series") or {}
    metadata = event.get("metadata") or {}
    for value in (series.get("lastObservedTime"), event.get("lastTimestamp"),
                  event.get("eventTime"), event.get("firstTimestamp"),
                  metadata.get("creationTimestamp")):
        when = parse_time(value)
        if when is not None:
            return when
    return None
