"""How a supervisor promotes a standby driver, and learns it is ready.

A standby driver starts Spark, loads the job's code, says it is ready and waits for
its promotion, which the supervisor writes only after it advanced the store's fence
to the new attempt. Two channels carry the promotion:

- ``cjob run``: ``--standby PROMOTION``. The promotion is the file ``PROMOTION``;
  readiness is ``<PROMOTION>.ready``, which the supervisor reads.
- The operator: ``--standby-pod POD`` with a ConfigMap store. The promotion is the
  annotation :data:`PROMOTION_ANNOTATION` of the job's checkpoint ConfigMap, naming
  the pod it promotes (every standby the job ever had watches the same ConfigMap).
  Readiness is ``--standby-ready-file``, which the pod's readiness probe tests, so
  the pod's Ready condition says it.

Every signal crosses a process boundary and may be written and read by different
releases, so each is a typed structure with a format ``version``, written whole (a
reader sees nothing or all of it).

The contract lives beside the runtime's settings (:mod:`cjob_spec.runtime_args`)
because the supervisor writes it and must not import the runtime to do so.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from cjob_spec.versioned import versioned_body

FORMAT_VERSION = 1
PROMOTION_ANNOTATION = "checkpointed.io/standby-promotion"
"""The checkpoint ConfigMap's annotation holding the operator's latest promotion."""
SUPERVISOR_PID_ENV = "CJOB_SUPERVISOR_PID"
"""Set by ``cjob run`` for a standby it starts: its own process id. A standby whose
parent is no longer that process can never be promoted and exits. The standby learns
it from its start, not from its parent when it begins to wait: a supervisor that died
while the standby was starting Spark has already left it to another parent."""


class StandbySignalError(ValueError):
    """A promotion or readiness file that cannot be read; the message names the problem."""


def ready_path(promotion: str | Path) -> Path:
    """Where the standby waiting for ``promotion`` says it is ready."""
    return Path(f"{os.fspath(promotion)}.ready")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StandbyPromotion:
    """Take over ``attempt``: restore ``restore`` (a runtime ``--restore`` value) and write
    the driver status to ``status_file``, as a driver started for that attempt would.

    ``pod`` names the standby promoted, where one channel serves several standbys (the
    ConfigMap's annotation); a promotion naming another pod is not this standby's.
    """

    attempt: int
    restore: str
    status_file: str | None = None
    pod: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"version": FORMAT_VERSION, "attempt": self.attempt,
                                "restore": self.restore, "statusFile": self.status_file}
        if self.pod is not None:
            body["pod"] = self.pod
        return body

    @classmethod
    def from_json(cls, data: object) -> StandbyPromotion:
        body = _versioned(data, what="promotion")
        attempt = body.get("attempt")
        restore = body.get("restore")
        status_file = body.get("statusFile")
        pod = body.get("pod")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise StandbySignalError(f"promotion: attempt must be a number >= 1, got {attempt!r}")
        if not isinstance(restore, str) or not restore:
            raise StandbySignalError(f"promotion: restore must be a non-empty string, "
                                     f"got {restore!r}")
        if status_file is not None and not isinstance(status_file, str):
            raise StandbySignalError(f"promotion: statusFile must be a string, "
                                     f"got {status_file!r}")
        if pod is not None and (not isinstance(pod, str) or not pod):
            raise StandbySignalError(f"promotion: pod must be a non-empty string, got {pod!r}")
        return cls(attempt=attempt, restore=restore, status_file=status_file, pod=pod)

    def encode(self) -> str:
        """The promotion as the text of :data:`PROMOTION_ANNOTATION`."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> StandbyPromotion:
        """Read :data:`PROMOTION_ANNOTATION`; a text this release cannot read is an error."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StandbySignalError(f"promotion: not valid JSON: {exc}") from None
        return cls.from_json(data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StandbyReady:
    """The standby process ``pid`` has its Spark started and its job code loaded."""

    pid: int
    ready_at: float

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "pid": self.pid, "readyAt": self.ready_at}

    @classmethod
    def from_json(cls, data: object) -> StandbyReady:
        body = _versioned(data, what="readiness")
        pid, ready_at = body.get("pid"), body.get("readyAt")
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise StandbySignalError(f"readiness: pid must be a number, got {pid!r}")
        if not isinstance(ready_at, int | float) or isinstance(ready_at, bool):
            raise StandbySignalError(f"readiness: readyAt must be a number, got {ready_at!r}")
        return cls(pid=pid, ready_at=float(ready_at))


def _versioned(data: object, *, what: str) -> dict[str, Any]:
    return versioned_body(data, what=what, version=FORMAT_VERSION, error=StandbySignalError)


def write_signal(path: str | Path, signal: StandbyPromotion | StandbyReady) -> None:
    """Write ``signal`` to ``path`` whole: to a temporary name, then renamed."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(signal.to_json()))
    os.replace(temporary, target)


def read_promotion(path: str | Path) -> StandbyPromotion | None:
    """The promotion at ``path``; ``None`` while there is none."""
    data = _read(path)
    return None if data is None else StandbyPromotion.from_json(data)


def read_ready(path: str | Path) -> StandbyReady | None:
    """The readiness at ``path``; ``None`` while the standby is not ready."""
    data = _read(path)
    return None if data is None else StandbyReady.from_json(data)


def _read(path: str | Path) -> object:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StandbySignalError(f"{path} is not valid JSON: {exc}") from None
