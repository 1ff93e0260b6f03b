"""The status of a CheckpointedJob, shared by the operator and the embedded runner.

``to_dict`` produces the CR's camelCase ``status`` shape (and the embedded runner's
``status.json``); ``from_dict`` reads it back leniently: status is written by us, but a
hand-edited or older status must never stop the job from being reconciled, so fields
with the wrong type are dropped rather than raising.

Conditions follow the Kubernetes API conventions: ``type``, ``status``
(``True``/``False``/``Unknown``), a CamelCase ``reason``, a human ``message``,
``lastTransitionTime`` (changes only when ``status`` flips) and ``observedGeneration``.
The condition types are:

* ``Ready`` - the job's driver is running and processing records.
* ``Progressing`` - the controller is moving the job towards its desired state
  (starting, backing off before a restart, upgrading, suspending, resuming).
* ``Checkpointing`` - while running: ``True`` when checkpoints complete in time,
  ``False`` when the latest one is overdue, ``Unknown`` before the first one and when
  the job is not running.
* ``Failed`` - the job has failed for good (``phase: Failed``); the reason says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from cjob_spec.times import format_time, parse_time, truncate_to_seconds

_T = TypeVar("_T")


class Phase(StrEnum):
    PENDING = "Pending"
    """A driver pod for the current attempt was created and has not started running."""
    RUNNING = "Running"
    RESTARTING = "Restarting"
    """The last attempt ended; a new one starts after the backoff (or an upgrade)."""
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def is_terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class DiscardedReplacement(StrEnum):
    """What an attempt starts from while the state a change discarded is still the
    store's latest (``JobStatus.discarded_through``)."""

    EMPTY = "Empty"
    """An ``upgradeMode: Stateless`` upgrade: nothing."""
    RESTORE_SOURCE = "RestoreSource"
    """A redeploy (``spec.restore.redeployNonce``): ``spec.restore``'s from or snapshot."""


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    CHECKPOINTING = "Checkpointing"
    FAILED = "Failed"
    ROLLED_BACK = "RolledBack"
    """With ``spec.rollback``: whether the job runs its last good spec instead of its own."""


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: datetime
    observed_generation: int | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "type": self.type,
            "status": self.status.value,
            "reason": str(self.reason),
            "message": self.message,
            "lastTransitionTime": format_time(self.last_transition_time),
        }
        if self.observed_generation is not None:
            result["observedGeneration"] = self.observed_generation
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Condition | None:
        kind = data.get("type")
        status = data.get("status")
        moment = _time(data, "lastTransitionTime")
        if (
            not isinstance(kind, str)
            or status not in ("True", "False", "Unknown")
            or moment is None
        ):
            return None
        return cls(
            type=kind,
            status=ConditionStatus(status),
            reason=_str(data, "reason") or "",
            message=_str(data, "message") or "",
            last_transition_time=moment,
            observed_generation=_int(data, "observedGeneration"),
        )


@dataclass(frozen=True)
class CheckpointRef:
    """A completed checkpoint: its id and the pointer to its ``_metadata``."""

    id: int
    path: str
    completed_at: datetime | None = None
    size_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"id": self.id, "path": self.path}
        if self.completed_at is not None:
            result["completedAt"] = format_time(self.completed_at)
        if self.size_bytes is not None:
            result["sizeBytes"] = self.size_bytes
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointRef | None:
        checkpoint_id = _int(data, "id")
        path = _str(data, "path")
        if checkpoint_id is None or path is None:
            return None
        return cls(
            id=checkpoint_id,
            path=path,
            completed_at=_time(data, "completedAt"),
            size_bytes=_int(data, "sizeBytes"),
        )


@dataclass(frozen=True)
class RestoredFrom:
    """What the current attempt restored from: an id, a path, or both."""

    id: int | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if self.id is not None:
            result["id"] = self.id
        if self.path is not None:
            result["path"] = self.path
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RestoredFrom | None:
        value = cls(id=_int(data, "id"), path=_str(data, "path"))
        return None if value.id is None and value.path is None else value


@dataclass(frozen=True)
class FailureRecord:
    """The last time an attempt ended badly: why, how, when, which attempt."""

    reason: str
    message: str
    at: datetime
    exit_code: int | None = None
    attempt: int | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "reason": str(self.reason),
            "message": self.message,
            "at": format_time(self.at),
        }
        if self.exit_code is not None:
            result["exitCode"] = self.exit_code
        if self.attempt is not None:
            result["attempt"] = self.attempt
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailureRecord | None:
        reason = _str(data, "reason")
        moment = _time(data, "at")
        if reason is None or moment is None:
            return None
        return cls(
            reason=reason,
            message=_str(data, "message") or "",
            at=moment,
            exit_code=_int(data, "exitCode"),
            attempt=_int(data, "attempt"),
        )


@dataclass(frozen=True)
class StableSpec:
    """The last spec that ran well: an attempt of it completed a checkpoint after it
    started (kept with ``spec.rollback``, to return to)."""

    spec_hash: str
    spec: Mapping[str, Any]
    """The spec as the CheckpointedJob held it."""

    def to_dict(self) -> dict[str, Any]:
        return {"specHash": self.spec_hash, "spec": dict(self.spec)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StableSpec | None:
        spec_hash = _str(data, "specHash")
        spec = data.get("spec")
        if spec_hash is None or not isinstance(spec, Mapping):
            return None
        return cls(spec_hash=spec_hash, spec=dict(spec))


@dataclass(frozen=True)
class PendingUpgrade:
    """A changed spec not proven yet: its first attempt started at ``started_at``, from
    checkpoint ``checkpoint_id`` (the newest before the change). It is proven once one
    of its attempts completes a newer checkpoint."""

    spec_hash: str
    started_at: datetime
    checkpoint_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"specHash": self.spec_hash,
                                  "startedAt": format_time(self.started_at)}
        if self.checkpoint_id is not None:
            result["checkpointId"] = self.checkpoint_id
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingUpgrade | None:
        spec_hash = _str(data, "specHash")
        started = _time(data, "startedAt")
        if spec_hash is None or started is None:
            return None
        return cls(spec_hash=spec_hash, started_at=started,
                   checkpoint_id=_int(data, "checkpointId"))


class ScalingReason(StrEnum):
    """Why the autoscaler recommends what it recommends (``status.autoscaler.reason``)."""

    SCALE_UP = "ScaleUp"
    """The job falls behind, or would read its backlog away too slowly."""
    SCALE_DOWN = "ScaleDown"
    """Fewer subtasks keep up at the target utilization."""
    STEADY = "Steady"
    NOT_ENOUGH_DATA = "NotEnoughData"
    """Too few samples of the running attempt yet."""
    NO_LAG_METRIC = "NoLagMetric"
    """The job's sources report no lag (only Kafka sources do)."""
    CAPACITY_UNKNOWN = "CapacityUnknown"
    """The job never fell behind, so what a subtask can read is not measured yet: it
    keeps up, and only scaling up could be recommended."""


@dataclass(frozen=True)
class AutoscalerStatus:
    """``status.autoscaler``: the latest decision, and the parallelism Apply set."""

    reason: ScalingReason
    message: str = ""
    recommended: int | None = None
    recommended_since: datetime | None = None
    """Since when the same parallelism has been recommended (the stabilization clock)."""
    parallelism: int | None = None
    """Apply: the parallelism the job runs at instead of ``spec.parallelism``."""
    spec_parallelism: int | None = None
    """``spec.parallelism`` when Apply set :attr:`parallelism`: a change of it (``kubectl
    scale``) wins over the autoscaler's choice."""
    last_scaled_at: datetime | None = None
    input_rate: float | None = None
    """Records per second the sources read, over the latest window."""
    lag_records: int | None = None
    capacity_per_subtask: float | None = None
    """Records per second one subtask read while the job was behind: its capacity."""

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"reason": self.reason.value, "message": self.message}
        for key, value in (
                ("recommended", self.recommended),
                ("recommendedSince", self.recommended_since
                 and format_time(self.recommended_since)),
                ("parallelism", self.parallelism),
                ("specParallelism", self.spec_parallelism),
                ("lastScaledAt", self.last_scaled_at and format_time(self.last_scaled_at)),
                ("inputRate", None if self.input_rate is None else round(self.input_rate, 3)),
                ("lagRecords", self.lag_records),
                ("capacityPerSubtask", None if self.capacity_per_subtask is None
                 else round(self.capacity_per_subtask, 3))):
            if value is not None:
                result[key] = value
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AutoscalerStatus | None:
        known = {item.value: item for item in ScalingReason}
        reason = known.get(_str(data, "reason") or "")
        if reason is None:
            return None
        return cls(reason=reason, message=_str(data, "message") or "",
                   recommended=_int(data, "recommended"),
                   recommended_since=_time(data, "recommendedSince"),
                   parallelism=_int(data, "parallelism"),
                   spec_parallelism=_int(data, "specParallelism"),
                   last_scaled_at=_time(data, "lastScaledAt"),
                   input_rate=_float(data, "inputRate"),
                   lag_records=_int(data, "lagRecords"),
                   capacity_per_subtask=_float(data, "capacityPerSubtask"))


@dataclass(frozen=True)
class JobStatus:
    """``status`` of a CheckpointedJob. An empty status means "never reconciled"."""

    phase: Phase | None = None
    reason: str | None = None
    """CamelCase reason of the current phase (``BackingOff``, ``Upgrading``...)."""
    message: str | None = None
    attempt: int = 0
    """Number of the current (or last) attempt; attempt n runs in pod ``<job>-attempt-<n>``."""
    restarts: int = 0
    """Restarts after failures since the job was last healthy for ``resetAfter``."""
    driver_pod: str | None = None
    spec_hash: str | None = None
    """Hash of the spec the current attempt was started with (see ``spec_hash``)."""
    started_at: datetime | None = None
    """When the current attempt's driver pod was created."""
    running_since: datetime | None = None
    """When the current attempt's driver started running."""
    last_restart_at: datetime | None = None
    next_restart_at: datetime | None = None
    latest_checkpoint: CheckpointRef | None = None
    restored_from: RestoredFrom | None = None
    last_failure: FailureRecord | None = None
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = None
    last_trigger_nonce: str | None = None
    """The last ``spec.checkpoint.triggerNonce`` the operator acted on."""
    suspend_requested_at: datetime | None = None
    """When a final checkpoint was requested before suspending the running attempt."""
    parallelism: int | None = None
    """The parallelism the current attempt was started with: the scale subresource's
    replicas (``kubectl scale`` changes ``spec.parallelism``; this follows once the
    rescaled attempt starts)."""
    selector: str | None = None
    """The label selector of the job's pods, for autoscalers (the scale subresource's)."""
    stable_spec: StableSpec | None = None
    """With ``spec.rollback``: the last spec that ran well, to return to."""
    upgrade: PendingUpgrade | None = None
    """With ``spec.rollback``: the changed spec now running, until it proves itself."""
    discarded_through: int | None = None
    """After an ``upgradeMode: Stateless`` upgrade: the newest checkpoint of the state it
    discarded (0: there was none). An attempt restores nothing while the store's latest
    checkpoint is this one or older, so a restart before the new spec's first
    checkpoint does not bring the old state back."""
    discarded_attempt: int | None = None
    """With ``discarded_through``: the attempt the upgrade stopped. Its driver may still
    complete a checkpoint between the change and its end; that checkpoint holds the
    discarded state as well, so only a checkpoint of a later attempt ends the discard."""
    discarded_replacement: DiscardedReplacement | None = None
    """With ``discarded_through``: what attempts start from instead of the discarded
    state (``None`` reads as ``EMPTY``, what a status written before redeploys means)."""
    last_redeploy_nonce: str | None = None
    """The last ``spec.restore.redeployNonce`` the operator acted on."""
    rolled_back_spec_hash: str | None = None
    """The hash of a spec that was rolled back: while the job's spec still hashes to it,
    the job runs ``stable_spec`` instead."""
    autoscaler: AutoscalerStatus | None = None
    """With ``spec.autoscaler``: its latest decision."""
    storage_roots: tuple[str, ...] = ()
    """Every checkpoint directory (``<storage>/<job>-<uid>``) an attempt was started
    with, oldest first: a job whose storage changed has checkpoints under each, and
    ``cleanupPolicy.checkpoints: Delete`` deletes them all."""

    def condition(self, kind: str) -> Condition | None:
        return next((item for item in self.conditions if item.type == kind), None)

    def replace(self, **changes: Any) -> JobStatus:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if self.phase is not None:
            result["phase"] = self.phase.value
        for key, value in (("reason", self.reason), ("message", self.message)):
            if value is not None:
                result[key] = str(value)  # a Reason is written as the plain string it is
        result["attempt"] = self.attempt
        result["restarts"] = self.restarts
        optional: list[tuple[str, Any]] = [
            ("driverPod", self.driver_pod),
            ("specHash", self.spec_hash),
            ("startedAt", self.started_at and format_time(self.started_at)),
            ("runningSince", self.running_since and format_time(self.running_since)),
            ("lastRestartAt", self.last_restart_at and format_time(self.last_restart_at)),
            ("nextRestartAt", self.next_restart_at and format_time(self.next_restart_at)),
            ("latestCheckpoint", self.latest_checkpoint and self.latest_checkpoint.to_dict()),
            ("restoredFrom", self.restored_from and self.restored_from.to_dict()),
            ("lastFailure", self.last_failure and self.last_failure.to_dict()),
            ("observedGeneration", self.observed_generation),
            ("lastTriggerNonce", self.last_trigger_nonce),
            (
                "suspendRequestedAt",
                self.suspend_requested_at and format_time(self.suspend_requested_at),
            ),
            ("parallelism", self.parallelism),
            ("selector", self.selector),
            ("lastStableSpec", self.stable_spec and self.stable_spec.to_dict()),
            ("upgrade", self.upgrade and self.upgrade.to_dict()),
            ("discardedThrough", self.discarded_through),
            ("discardedAttempt", self.discarded_attempt),
            ("discardedReplacement",
             self.discarded_replacement and self.discarded_replacement.value),
            ("lastRedeployNonce", self.last_redeploy_nonce),
            ("rolledBackSpecHash", self.rolled_back_spec_hash),
            ("autoscaler", self.autoscaler and self.autoscaler.to_dict()),
        ]
        for key, value in optional:
            if value is not None:
                result[key] = value
        if self.storage_roots:
            result["storageRoots"] = list(self.storage_roots)
        result["conditions"] = [item.to_dict() for item in self.conditions]
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JobStatus:
        if not data:
            return cls()
        phase_text = data.get("phase")
        phase = Phase(phase_text) if phase_text in {p.value for p in Phase} else None
        conditions: list[Condition] = []
        raw_conditions = data.get("conditions")
        if isinstance(raw_conditions, list):
            for item in raw_conditions:
                if isinstance(item, Mapping):
                    condition = Condition.from_dict(item)
                    if condition is not None:
                        conditions.append(condition)
        return cls(
            phase=phase,
            reason=_str(data, "reason"),
            message=_str(data, "message"),
            attempt=max(0, _int(data, "attempt") or 0),
            restarts=max(0, _int(data, "restarts") or 0),
            driver_pod=_str(data, "driverPod"),
            spec_hash=_str(data, "specHash"),
            started_at=_time(data, "startedAt"),
            running_since=_time(data, "runningSince"),
            last_restart_at=_time(data, "lastRestartAt"),
            next_restart_at=_time(data, "nextRestartAt"),
            latest_checkpoint=_nested(data, "latestCheckpoint", CheckpointRef.from_dict),
            restored_from=_nested(data, "restoredFrom", RestoredFrom.from_dict),
            last_failure=_nested(data, "lastFailure", FailureRecord.from_dict),
            conditions=tuple(conditions),
            observed_generation=_int(data, "observedGeneration"),
            last_trigger_nonce=_str(data, "lastTriggerNonce"),
            suspend_requested_at=_time(data, "suspendRequestedAt"),
            storage_roots=_strings(data, "storageRoots"),
            parallelism=_int(data, "parallelism"),
            selector=_str(data, "selector"),
            stable_spec=_nested(data, "lastStableSpec", StableSpec.from_dict),
            upgrade=_nested(data, "upgrade", PendingUpgrade.from_dict),
            discarded_through=_int(data, "discardedThrough"),
            discarded_attempt=_int(data, "discardedAttempt"),
            discarded_replacement=_replacement(data),
            last_redeploy_nonce=_str(data, "lastRedeployNonce"),
            rolled_back_spec_hash=_str(data, "rolledBackSpecHash"),
            autoscaler=_nested(data, "autoscaler", AutoscalerStatus.from_dict),
        )


def set_condition(
    conditions: Sequence[Condition],
    *,
    kind: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> tuple[Condition, ...]:
    """Return ``conditions`` with condition ``kind`` set, keeping the others in order.

    ``lastTransitionTime`` is kept when the condition's status does not change (a new
    reason or message alone is not a transition) and set to ``now`` otherwise.
    """
    previous = next((item for item in conditions if item.type == kind), None)
    moment = truncate_to_seconds(now)
    if previous is not None and previous.status == status:
        moment = previous.last_transition_time
    updated = Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=moment,
        observed_generation=observed_generation,
    )
    if previous is None:
        return (*conditions, updated)
    return tuple(updated if item.type == kind else item for item in conditions)


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _replacement(data: Mapping[str, Any]) -> DiscardedReplacement | None:
    value = data.get("discardedReplacement")
    known = {item.value: item for item in DiscardedReplacement}
    return known.get(value) if isinstance(value, str) else None


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list):
        return ()
    return tuple(dict.fromkeys(item for item in value if isinstance(item, str) and item))


def _int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _time(data: Mapping[str, Any], key: str) -> datetime | None:
    value = data.get(key)
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _nested(
    data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any]], _T | None]
) -> _T | None:
    value = data.get(key)
    if not isinstance(value, Mapping):
        return None
    return read(value)
