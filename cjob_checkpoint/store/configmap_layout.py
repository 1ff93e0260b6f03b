"""What the checkpoint ConfigMap holds, and how to read and change it (no API calls).

``<job>-checkpoints`` (label ``checkpointed.io/job=<job>``)::

    metadata.annotations:
      checkpointed.io/fence-attempt: "3"          the only attempt allowed to write
      checkpointed.io/restored: {...}             what that attempt restored (RestoreReport)
      checkpointed.io/staged-inputs: {...}        the published staged inputs (StagedInputs)
      checkpointed.io/holds: {...}                checkpoints pruning skips (CheckpointHolds)
    data:
      checkpointID-0000000000000000042: {...}     pointer: CompletedCheckpoint JSON
      discarding-0000000000000000040: {...}       discard marker of checkpoint 40
      counter: "43"                               the next checkpoint id

Markers are separate keys rather than a change of the pointer, so a reader that
only knows the ``checkpointID-`` keys still finds every pointer intact; readers
of this module skip marked pointers. Everything here works on the plain JSON
dict of the object, so the operator and tests can use it on what they read.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from cjob_checkpoint.store.completed_store import CompletedCheckpoint, CorruptPointerError
from cjob_checkpoint.store.configmap_errors import CorruptStoreDataError
from cjob_checkpoint.store.holds import CheckpointHolds, UnreadableHoldsError
from cjob_checkpoint.store.restore_report import RestoreReport, UnreadableRestoreReportError
from cjob_checkpoint.store.state import StoreState, marker_text, next_checkpoint_id
from cjob_spec.driver_beacon import DRIVER_LOST_ANNOTATION, BeaconSignalError, DriverLost
from cjob_spec.names import (
    ANNOTATION_FENCE,
    CHECKPOINT_POINTER_NAME,
    CONFIGMAP_CHECKPOINT_KEY_FORMAT,
    CONFIGMAP_COUNTER_KEY,
    LABEL_JOB,
)
from cjob_spec.standby_signal import PROMOTION_ANNOTATION, StandbyPromotion, StandbySignalError

__all__ = [
    "ANNOTATION_FENCE",
    "ANNOTATION_HOLDS",
    "ANNOTATION_RESTORED",
    "ANNOTATION_STAGED_INPUTS",
    "COUNTER_KEY",
    "DEFAULT_BUDGET_BYTES",
    "LABEL_JOB",
    "StoreObject",
    "StoreSnapshot",
    "marker_key",
    "pointer_key",
]

COUNTER_KEY = CONFIGMAP_COUNTER_KEY
ANNOTATION_RESTORED = "checkpointed.io/restored"
"""The driver's :class:`RestoreReport` for its attempt: an annotation, not a data key,
so readers that iterate the data (pointers, markers, counter) never meet it."""
ANNOTATION_STAGED_INPUTS = "checkpointed.io/staged-inputs"
"""The job's published staged inputs (``StagedInputs``), kept raw: an annotation, like
the restore report, so readers that iterate the data never meet it."""
ANNOTATION_HOLDS = "checkpointed.io/holds"
"""Checkpoints a copier (a snapshot) is reading, which pruning skips (``CheckpointHolds``)."""
MARKER_KEY_FORMAT = "discarding-%019d"
DEFAULT_BUDGET_BYTES = 256 * 1024
"""A quarter of the 1 MiB a ConfigMap may hold: room for about a thousand pointers."""

_POINTER = CHECKPOINT_POINTER_NAME
_MARKER = re.compile(r"^discarding-(\d{19})$")


def pointer_key(checkpoint_id: int) -> str:
    """``checkpointID-%019d``: the data key of a checkpoint's pointer."""
    return CONFIGMAP_CHECKPOINT_KEY_FORMAT % checkpoint_id


def marker_key(checkpoint_id: int) -> str:
    """``discarding-%019d``: the data key that marks a pointer for discard."""
    return MARKER_KEY_FORMAT % checkpoint_id


OWNER_KIND = "CheckpointedJob"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreOwner:
    """A CheckpointedJob named in the ConfigMap's ``ownerReferences``.

    The operator creates a job's store owned by the job, so a store owned by
    another uid (or by none) holds another job's checkpoints and is not adopted."""

    name: str
    uid: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreSnapshot:
    """One consistent reading of the ConfigMap (one ``resourceVersion``)."""

    namespace: str
    name: str
    resource_version: str
    fence_attempt: int
    counter: int | None
    """The stored ``counter`` value, if the key exists."""
    pointer_ids: tuple[int, ...]
    """Every pointer key's id, marked and damaged ones included, ascending."""
    checkpoints: tuple[CompletedCheckpoint, ...]
    """Live (unmarked, readable) pointers, oldest first."""
    marked: tuple[int, ...]
    """Ids whose pointer is marked for discard and still present."""
    corrupt: tuple[CorruptPointerError, ...]
    """Unmarked pointers that could not be parsed."""
    size_bytes: int
    restore_report: RestoreReport | None = None
    """What the attempt that wrote it restored; ``None`` if absent or unreadable."""
    restore_report_problem: str | None = None
    """Why a recorded report could not be read, if it could not."""
    owners: tuple[StoreOwner, ...] = ()
    """The CheckpointedJobs among the object's owners (normally exactly its job)."""
    promotion: StandbyPromotion | None = None
    """The operator's latest standby promotion (which pod takes which attempt); ``None``
    if absent or unreadable."""
    driver_lost: DriverLost | None = None
    """A standby's latest report that the active driver is gone; ``None`` if absent or
    unreadable (no report: the kubelet's report of the driver's end still comes)."""
    holds: CheckpointHolds = dataclasses.field(default_factory=CheckpointHolds)
    """Who keeps which checkpoint from being pruned (empty if unreadable)."""
    holds_problem: str | None = None
    """Why the recorded holds could not be read, if they could not."""

    @property
    def latest(self) -> CompletedCheckpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def next_checkpoint_id(self, *, start: int = 1) -> int:
        """What the counter hands out next: never below any pointer id + 1."""
        return next_checkpoint_id(counter=self.counter, pointer_ids=self.pointer_ids,
                                  start=start)


class StoreObject:
    """A ConfigMap read from the apiserver, decoded, and changed in memory.

    The changes are written back as a whole with the ``resourceVersion`` it was
    read at, which makes every change a compare-and-swap.
    """

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj: dict[str, Any] = copy.deepcopy(dict(obj))
        metadata = self.obj.setdefault("metadata", {})
        self.namespace = str(metadata.get("namespace", ""))
        self.name = str(metadata.get("name", ""))
        if not isinstance(self.obj.get("data"), dict):
            self.obj["data"] = {}
        if not isinstance(metadata.get("annotations"), dict):
            metadata["annotations"] = {}

    # ------------------------------------------------------------------ raw parts

    @property
    def data(self) -> dict[str, str]:
        data: dict[str, str] = self.obj["data"]
        return data

    @property
    def annotations(self) -> dict[str, str]:
        annotations: dict[str, str] = self.obj["metadata"]["annotations"]
        return annotations

    @property
    def resource_version(self) -> str:
        return str(self.obj["metadata"].get("resourceVersion", ""))

    def _corrupt(self, *, key: str, value: str) -> CorruptStoreDataError:
        return CorruptStoreDataError(namespace=self.namespace, name=self.name, key=key,
                                     value=value)

    def _number(self, value: str | None, *, key: str) -> int | None:
        if value is None:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            raise self._corrupt(key=key, value=value) from None
        if number < 0:
            raise self._corrupt(key=key, value=value)
        return number

    @property
    def owners(self) -> tuple[StoreOwner, ...]:
        references = self.obj["metadata"].get("ownerReferences")
        if not isinstance(references, list):
            return ()
        return tuple(
            StoreOwner(name=str(ref.get("name", "")), uid=str(ref.get("uid", "")))
            for ref in references
            if isinstance(ref, Mapping) and ref.get("kind") == OWNER_KIND
        )

    # ------------------------------------------------------------------ fence, counter

    @property
    def fence_attempt(self) -> int:
        """The attempt that owns the store; a missing annotation means 0."""
        value = self._number(self.annotations.get(ANNOTATION_FENCE),
                             key=f"annotation {ANNOTATION_FENCE}")
        return 0 if value is None else value

    def set_fence_attempt(self, attempt: int) -> None:
        self.annotations[ANNOTATION_FENCE] = str(attempt)

    # ------------------------------------------------------------------ restore report

    @property
    def restore_report_text(self) -> str | None:
        return self.annotations.get(ANNOTATION_RESTORED)

    def set_restore_report_text(self, text: str) -> None:
        self.annotations[ANNOTATION_RESTORED] = text

    def _restore_report(self) -> tuple[RestoreReport | None, str | None]:
        text = self.restore_report_text
        if text is None:
            return None, None
        try:
            return RestoreReport.from_json(text), None
        except UnreadableRestoreReportError as exc:
            return None, f"annotation {ANNOTATION_RESTORED}: {exc}"

    def _promotion(self) -> StandbyPromotion | None:
        text = self.annotations.get(PROMOTION_ANNOTATION)
        if not text:
            return None
        try:
            return StandbyPromotion.decode(text)
        except StandbySignalError:
            return None

    def _driver_lost(self) -> DriverLost | None:
        text = self.annotations.get(DRIVER_LOST_ANNOTATION)
        if not text:
            return None
        try:
            return DriverLost.decode(text)
        except (BeaconSignalError, ValueError, TypeError, OverflowError):
            # Whatever is wrong with one annotation, every other read of the store
            # (checkpoints, fence, promotion) must still work.
            return None

    @property
    def counter(self) -> int | None:
        return self._number(self.data.get(COUNTER_KEY), key=f"key {COUNTER_KEY}")

    def set_counter(self, value: int) -> None:
        self.data[COUNTER_KEY] = str(value)

    # ------------------------------------------------------------------ pointers

    def pointer_ids(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_POINTER.match, self.data) if m)

    def marked_ids(self) -> set[int]:
        """Ids with a marker key (whether or not the pointer still exists)."""
        return {int(m.group(1)) for m in map(_MARKER.match, self.data) if m}

    def live_ids(self) -> list[int]:
        marked = self.marked_ids()
        return [i for i in self.pointer_ids() if i not in marked]

    def locate(self, checkpoint_id: int) -> str:
        """``configmap:NS/NAME#KEY``: where a pointer is, for error messages."""
        return f"configmap:{self.namespace}/{self.name}#{pointer_key(checkpoint_id)}"

    def pointer(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Decode one pointer; raises :class:`CorruptPointerError` if it is damaged."""
        return self.state().pointer(checkpoint_id, locate=self.locate)

    def put_pointer(self, checkpoint: CompletedCheckpoint) -> None:
        """Add or replace a pointer; a re-added id is no longer marked."""
        self.data[pointer_key(checkpoint.checkpoint_id)] = checkpoint.to_json()
        self.data.pop(marker_key(checkpoint.checkpoint_id), None)

    def mark(self, checkpoint_id: int, *, attempt: int, at: float) -> None:
        self.data[marker_key(checkpoint_id)] = marker_text(attempt=attempt, at=at)

    def unmark(self, checkpoint_id: int) -> None:
        self.data.pop(marker_key(checkpoint_id), None)

    def remove_pointer(self, checkpoint_id: int) -> None:
        """Remove a pointer and its marker (the last phase of a discard)."""
        self.data.pop(pointer_key(checkpoint_id), None)
        self.data.pop(marker_key(checkpoint_id), None)

    # ------------------------------------------------------------------ whole object

    def body(self) -> dict[str, Any]:
        """The object to send back: as read, without server-managed bookkeeping.

        ``managedFields`` is left out (the apiserver keeps its own when an update
        omits it) and so is ``status`` (ConfigMaps have none).
        """
        body = copy.deepcopy(self.obj)
        body["metadata"].pop("managedFields", None)
        body.pop("status", None)
        return body

    @property
    def size_bytes(self) -> int:
        """Bytes of the object as JSON (what etcd stores, give or take bookkeeping)."""
        return len(json.dumps(self.body(), sort_keys=True, separators=(",", ":")).encode())

    def state(self) -> StoreState:
        """The store's state as the backends share it (raises on a damaged fence or
        counter: those are never guessed)."""
        data = self.data
        return StoreState(
            version=self.resource_version,
            fence=self.fence_attempt,
            counter=self.counter,
            pointers={i: data[pointer_key(i)] for i in self.pointer_ids()},
            markers={i: data[marker_key(i)] for i in self.marked_ids()},
            restore_report=self.restore_report_text,
            staged_inputs=self.annotations.get(ANNOTATION_STAGED_INPUTS),
            holds=self.annotations.get(ANNOTATION_HOLDS),
            origin=self,
        )

    def with_state(self, state: StoreState) -> StoreObject:
        """A copy of this object holding ``state`` (other keys and annotations kept)."""
        changed = StoreObject(self.obj)
        if state.fence != self.fence_attempt:
            changed.set_fence_attempt(state.fence)
        if state.counter is not None and state.counter != self.counter:
            changed.set_counter(state.counter)
        for checkpoint_id in self.pointer_ids():
            changed.data.pop(pointer_key(checkpoint_id), None)
        for checkpoint_id in self.marked_ids():
            changed.data.pop(marker_key(checkpoint_id), None)
        for checkpoint_id, text in sorted(state.pointers.items()):
            changed.data[pointer_key(checkpoint_id)] = text
        for checkpoint_id, text in sorted(state.markers.items()):
            changed.data[marker_key(checkpoint_id)] = text
        if state.restore_report is None:
            changed.annotations.pop(ANNOTATION_RESTORED, None)
        else:
            changed.set_restore_report_text(state.restore_report)
        if state.staged_inputs is None:
            changed.annotations.pop(ANNOTATION_STAGED_INPUTS, None)
        else:
            changed.annotations[ANNOTATION_STAGED_INPUTS] = state.staged_inputs
        if state.holds is None:
            changed.annotations.pop(ANNOTATION_HOLDS, None)
        else:
            changed.annotations[ANNOTATION_HOLDS] = state.holds
        return changed

    def snapshot(self) -> StoreSnapshot:
        state = self.state()
        checkpoints: list[CompletedCheckpoint] = []
        corrupt: list[CorruptPointerError] = []
        for entry in state.live_pointers(locate=self.locate):
            if isinstance(entry, CorruptPointerError):
                corrupt.append(entry)
            else:
                checkpoints.append(entry)
        report, report_problem = self._restore_report()
        try:
            holds, holds_problem = CheckpointHolds.decode(state.holds), None
        except UnreadableHoldsError as exc:
            holds, holds_problem = CheckpointHolds(), f"annotation {ANNOTATION_HOLDS}: {exc}"
        return StoreSnapshot(
            namespace=self.namespace,
            name=self.name,
            resource_version=self.resource_version,
            fence_attempt=state.fence,
            counter=state.counter,
            pointer_ids=tuple(state.pointer_ids()),
            checkpoints=tuple(checkpoints),
            marked=tuple(state.marked_pointer_ids()),
            corrupt=tuple(corrupt),
            size_bytes=self.size_bytes,
            restore_report=report,
            restore_report_problem=report_problem,
            owners=self.owners,
            driver_lost=self._driver_lost(),
            promotion=self._promotion(),
            holds=holds,
            holds_problem=holds_problem,
        )


def parse_store(obj: Mapping[str, Any]) -> StoreSnapshot:
    """Decode a ConfigMap's JSON (as the apiserver returns it) into a snapshot."""
    return StoreObject(obj).snapshot()


def build_store_configmap(
    *,
    namespace: str,
    name: str,
    job_name: str,
    owner_reference: Mapping[str, Any] | None,
    attempt: int = 0,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The empty store: labelled with its job and owned by it (so deleted with it)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**dict(labels or {}), LABEL_JOB: job_name},
        "annotations": {ANNOTATION_FENCE: str(attempt)},
    }
    if owner_reference is not None:
        metadata["ownerReferences"] = [dict(owner_reference)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {}}
