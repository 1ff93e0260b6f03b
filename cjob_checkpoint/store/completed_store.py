"""The completed-checkpoint store: where a job remembers which checkpoints finished.

This is our analogue of Flink's ``CompletedCheckpointStore`` and
``CheckpointIDCounter``. The coordinator writes every completed checkpoint here
*after* its ``_metadata`` file is durable, and a restarting job reads ``latest()``
to decide what to restore. One implementation (:mod:`cjob_checkpoint.store.backed`)
keeps these rules over three backends that only read and swap the store's state:
in-memory (tests), file (the embedded default) and ConfigMap (on Kubernetes).

Rules every implementation follows:

* data before pointer: a pointer is only added once ``_metadata`` is written;
* add, then prune: older checkpoints beyond ``retained`` are discarded only after
  the new pointer is committed, and the newest restorable checkpoint is never
  discarded;
* an ambiguous write never deletes data;
* only the current attempt may write (fencing), checked atomically with the write.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import logging
from collections.abc import Callable
from typing import Any

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.restore_report import (
    MAX_REPORT_BYTES,
    RestoreReport,
    UnreadableRestoreReportError,
)

_log = logging.getLogger(__name__)


class JobOutcome(enum.Enum):
    """How the job ended, passed to :meth:`CompletedCheckpointStore.shutdown`."""

    FINISHED = "FINISHED"
    FAILED = "FAILED"
    SUSPENDED = "SUSPENDED"
    CANCELED = "CANCELED"

    @property
    def is_globally_terminal(self) -> bool:
        """A globally terminal job will never be restored, so its checkpoints may go."""
        return self in (JobOutcome.FINISHED, JobOutcome.CANCELED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompletedCheckpoint:
    """A small pointer to a completed checkpoint's ``_metadata`` file."""

    checkpoint_id: int
    metadata_path: str
    timestamp: float
    size_bytes: int = 0
    attempt: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.checkpoint_id,
                "path": self.metadata_path,
                "timestamp": self.timestamp,
                "sizeBytes": self.size_bytes,
                "attempt": self.attempt,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CompletedCheckpoint:
        data: dict[str, Any] = json.loads(text)
        return cls(
            checkpoint_id=int(data["id"]),
            metadata_path=str(data["path"]),
            timestamp=float(data["timestamp"]),
            size_bytes=int(data.get("sizeBytes", 0)),
            attempt=int(data.get("attempt", 0)),
        )


Discarder = Callable[[CompletedCheckpoint], None]
"""Deletes a checkpoint's data (its ``chk-<id>`` directory); raises on failure."""


class StoreError(Exception):
    """Base class of the store's errors; ``reason`` is a CamelCase word for status."""

    reason = "StoreError"


@keyword_error
class FencedError(StoreError):
    """A writer of an older attempt tried to change the store."""

    reason = "Fenced"
    attempt: int
    current_attempt: int

    def describe(self) -> str:
        return (f"attempt {self.attempt} may not write checkpoints: attempt "
                f"{self.current_attempt} owns the store")


class AmbiguousWriteError(StoreError):
    """The write may or may not have been applied (timeout, lost connection)."""

    reason = "AmbiguousWrite"


class StoreFullError(StoreError):
    """Adding the pointer would cross the store's size budget."""

    reason = "StoreFull"


@keyword_error
class UnreadableCheckpointError(StoreError):
    """A pointer exists but its ``_metadata`` cannot be read."""

    reason = "UnreadableCheckpoint"
    checkpoint_id: int
    path: str
    cause: str

    def describe(self) -> str:
        return f"checkpoint {self.checkpoint_id} at {self.path} is unreadable: {self.cause}"


class CorruptPointerError(UnreadableCheckpointError):
    """A pointer exists but does not hold a valid ``CompletedCheckpoint``."""

    reason = "CorruptPointer"


class NoRestorableCheckpointError(UnreadableCheckpointError):
    """Every retained checkpoint is unreadable (reported for the newest one)."""

    reason = "NoRestorableCheckpoint"


class StoreClosedError(StoreError):
    """The store was shut down; a new one must be opened to write again."""

    reason = "StoreClosed"


class CompletedCheckpointStore(abc.ABC):
    """Keeps the pointers of the ``retained`` most recent completed checkpoints.

    ``prune_failures`` counts failed pruning steps (a refused marker write, data
    that could not be deleted). Once the new pointer is committed, a pruning
    failure never escapes :meth:`add_checkpoint_and_subsume_oldest`: the caller
    would take the add for failed and discard the data the pointer names. It is
    logged and counted instead, and the next add retries.
    """

    prune_failures: int = 0

    def _pruning_failed(self) -> None:
        self.prune_failures += 1

    def record_restore(self, report: RestoreReport) -> bool:
        """Record what ``report.attempt`` restored; returns whether it was recorded.

        The operator reads it to state ``status.restoredFrom`` as a fact rather than as
        its own prediction. The report is written under the store's fence: an older
        attempt raises :class:`FencedError` (a zombie must not overwrite the current
        attempt's report, and should stop). Any other failure is logged and ``False``
        returned: a missing report only leaves ``restoredFrom`` unset, which must not
        fail a job or hold up its checkpoints. A report over ``MAX_REPORT_BYTES`` is
        not written either, so the store's size budget stays for pointers.
        """
        text = report.to_json()
        if len(text.encode()) > MAX_REPORT_BYTES:
            _log.warning("not recording the restore of attempt %d: the report has %d bytes, "
                         "over %d", report.attempt, len(text.encode()), MAX_REPORT_BYTES)
            return False
        try:
            self._write_restore_report(text, attempt=report.attempt)
        except FencedError:
            raise
        except (StoreError, OSError) as exc:
            _log.warning("could not record the restore of attempt %d: %s", report.attempt, exc)
            return False
        return True

    def restore_report(self) -> RestoreReport | None:
        """The last recorded restore report, if any (see :meth:`record_restore`).

        A report this version cannot decode reads as ``None``: guessing what a driver
        restored would defeat the purpose of the report.
        """
        text = self._read_restore_report()
        if text is None:
            return None
        try:
            return RestoreReport.from_json(text)
        except UnreadableRestoreReportError as exc:
            _log.warning("ignoring an unreadable restore report: %s", exc)
            return None

    @abc.abstractmethod
    def _write_restore_report(self, text: str, *, attempt: int) -> None:
        """Store the encoded report with a fenced write."""

    @abc.abstractmethod
    def _read_restore_report(self) -> str | None:
        """The encoded report as stored, if any."""

    @abc.abstractmethod
    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        """Commit ``checkpoint``'s pointer, then discard those beyond ``retained``.

        Returns the checkpoints that were discarded. Raises :class:`FencedError`
        when the caller's attempt no longer owns the store, and
        :class:`AmbiguousWriteError` when the outcome of the commit is unknown (in
        which case nothing is discarded). After the commit nothing but
        :class:`FencedError` is raised: pruning failures are counted in
        ``prune_failures`` and retried by the next add.
        """

    @abc.abstractmethod
    def check_fence(self) -> None:
        """Raise :class:`FencedError` when a newer attempt owns the store; write nothing.

        For a writer about to give up for another reason: a zombie's checkpoints often
        fail before one reaches a fenced write, and the fence, not that failure, is why
        it must stop. A store that cannot be read raises its :class:`StoreError`.
        """

    @abc.abstractmethod
    def all(self, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
        """Every retained checkpoint not marked for discard, oldest first.

        A damaged pointer raises :class:`CorruptPointerError` unless ``skip_corrupt``
        (then it is logged and left out).
        """

    def latest(self, *, skip_corrupt: bool = False) -> CompletedCheckpoint | None:
        """The newest checkpoint that is not marked for discard, if any; see :meth:`all`."""
        checkpoints = self.all(skip_corrupt=skip_corrupt)
        return checkpoints[-1] if checkpoints else None

    @abc.abstractmethod
    def retained_pointers(self) -> list[CompletedCheckpoint | CorruptPointerError]:
        """Every live pointer, decoded or with the reason it cannot be, oldest first."""

    @abc.abstractmethod
    def shutdown(self, status: JobOutcome, *, discard: Discarder) -> None:
        """Release the store; a globally terminal job's checkpoints may be discarded."""


class CheckpointIdCounter(abc.ABC):
    """Hands out monotonically increasing checkpoint ids that survive restarts."""

    @abc.abstractmethod
    def get_and_increment(self) -> int:
        """Return the next id and persist the increment before returning."""

    @abc.abstractmethod
    def get(self) -> int:
        """The id the next call to :meth:`get_and_increment` returns."""

    @abc.abstractmethod
    def set_count(self, count: int) -> None:
        """Move the counter forward (never backwards) to ``count``."""
