"""The kube-apiserver's audit log, as a request counter for chosen identities.

Counting a client's requests on the client side only shows what the client thinks
it sent; the audit log is what the apiserver itself received and answered. The
control plane can start the apiserver with a policy that records, at ``Metadata``
level, every request of a few named users (and nothing of anyone else), one JSON
line per finished request (``ResponseComplete``; a watch counts once, when it ends,
and a request refused before it was served still counts, at ``Panic`` at worst).

:func:`read_audit_records` parses that file from a byte offset, so a reader can
count the requests of a time window: read once at its start (keeping the reading's
``end``) and again from that offset at its end.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

AUDIT_API_VERSION = "audit.k8s.io/v1"
OPERATOR_USER = "cjob-operator"
"""The identity tests and benchmarks give the operator when they count its requests."""
RECORDED_STAGES = frozenset({"ResponseComplete", "Panic"})


def write_audit_policy(*, path: Path, users: Iterable[str]) -> Path:
    """A policy recording every request of ``users`` at Metadata level, nothing else."""
    policy = {
        "apiVersion": AUDIT_API_VERSION,
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {"level": "Metadata", "users": sorted(users)},
            {"level": "None"},
        ],
    }
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


@dataclass(frozen=True)
class AuditRecord:
    """One request as the apiserver audited it (the fields a request count needs)."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    stage: str

    @property
    def kind(self) -> str:
        """``verb resource[/subresource]``, the unit request counts are grouped by."""
        target = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {target}"


class AuditLogError(ValueError):
    """A line of the audit log is not an audit event of the expected version."""


def parse_audit_line(line: str) -> AuditRecord | None:
    """The record of one audit log line; None for a stage that is not counted."""
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise AuditLogError(f"not JSON: {line[:120]!r}") from exc
    if not isinstance(event, dict) or event.get("apiVersion") != AUDIT_API_VERSION:
        raise AuditLogError(f"not an {AUDIT_API_VERSION} event: {line[:120]!r}")
    stage = str(event.get("stage", ""))
    if stage not in RECORDED_STAGES:
        return None
    target = event.get("objectRef") or {}
    user = event.get("user") or {}
    response = event.get("responseStatus") or {}
    return AuditRecord(
        user=str(user.get("username", "")),
        verb=str(event.get("verb", "")),
        resource=str(target.get("resource", "")),
        subresource=str(target.get("subresource", "")),
        namespace=str(target.get("namespace", "")),
        name=str(target.get("name", "")),
        code=int(response.get("code") or 0),
        stage=stage,
    )


@dataclass(frozen=True)
class AuditReading:
    """The records of one stretch of the log, and where the next stretch starts."""

    records: tuple[AuditRecord, ...]
    end: int
    """The offset just past the last whole line read."""


def read_audit_records(path: Path, *, offset: int = 0, user: str | None = None) -> AuditReading:
    """The records written since byte ``offset`` (a previous reading's ``end``).

    Only whole lines are read, so a line the apiserver is still writing is left
    for the next reading, which starts at this one's ``end``.
    """
    if not path.exists():
        return AuditReading(records=(), end=offset)
    with path.open("rb") as log:
        log.seek(offset)
        data = log.read()
    whole = data[: data.rfind(b"\n") + 1]
    records: list[AuditRecord] = []
    for raw in whole.split(b"\n"):
        if not raw.strip():
            continue
        record = parse_audit_line(raw.decode("utf-8", "replace"))
        if record is not None and (user is None or record.user == user):
            records.append(record)
    return AuditReading(records=tuple(records), end=offset + len(whole))


def count_by_kind(records: Iterable[AuditRecord]) -> dict[str, int]:
    """How many requests of each ``verb resource[/subresource]``, most frequent first."""
    return dict(Counter(record.kind for record in records).most_common())
