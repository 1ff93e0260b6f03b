"""The file-based completed-checkpoint store: the embedded runner's default.

One directory (next to ``status.json`` in the embedded runner's state dir)
holds, with the same names as the ConfigMap store's keys::

    checkpointID-0000000000000000042             pointer: CompletedCheckpoint JSON
    checkpointID-0000000000000000041.discarding  discard marker (two-phase prune)
    counter                                      next checkpoint id
    attempt                                      fence: the attempt that owns the store
    restored                                     what the current attempt restored
    .lock                                        flock(2) target

Every change happens while holding an exclusive ``flock`` on ``.lock`` and every
file is replaced with an atomic rename, so check-fence-then-write is atomic
between processes and a crash never leaves a torn file. Readers take a shared
lock, so they never see a pointer whose data is half deleted.

Fencing: before it starts a driver the embedded runner calls
:func:`advance_attempt`. A store or counter opened with an older ``attempt`` is
refused with :class:`FencedError` on every write, so a zombie driver of a
previous attempt cannot add or prune checkpoints. A writer with a newer attempt
than the file advances it.

Pruning is two-phase, as the design asks: mark (write the ``.discarding``
file), delete the data through the ``discard`` callback, remove the pointer,
remove the marker. Readers skip marked entries. A crash or a failing ``discard``
leaves a marked entry, which the next add retries; the data is never lost
without its pointer having been marked first, and the newest checkpoint is never
marked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from job_runtime.storage.filesystem import write_file_atomically
from job_runtime.store.base import (
    AmbiguousWriteError,
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    Discarder,
    FencedError,
    JobStatus,
    StoreError,
    UnreadableCheckpointError,
)
from job_runtime.store.retention import ensure_retained, ids_to_prune

_log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
ATTEMPT_NAME = "attempt"
COUNTER_NAME = "counter"
RESTORED_NAME = "restored"
POINTER_PREFIX = "checkpointID-"
MARKER_SUFFIX = ".discarding"
_POINTER = re.compile(r"^checkpointID-(\d{19})$")
_MARKER = re.compile(r"^checkpointID-(\d{19})\.discarding$")


def pointer_name(checkpoint_id: int) -> str:
    """``checkpointID-%019d``: the file name (and ConfigMap key) of a pointer."""
    return f"{POINTER_PREFIX}{checkpoint_id:019d}"


class CorruptPointerError(UnreadableCheckpointError):
    """A pointer file exists but does not hold a valid ``CompletedCheckpoint``."""

    reason = "CorruptPointer"


class CorruptStoreFileError(StoreError):
    """The ``counter`` or ``attempt`` file does not hold a number.

    Never repaired silently: guessing a counter could reuse checkpoint ids, and
    guessing the attempt could let a zombie writer in.
    """

    reason = "CorruptStoreFile"

    def __init__(self, *, path: str, cause: str) -> None:
        super().__init__(f"{path} is corrupt: {cause}; fix or remove it by hand")
        self.path = path
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_corrupt, (self.path, self.cause))


def _rebuild_corrupt(path: str, cause: str) -> CorruptStoreFileError:
    return CorruptStoreFileError(path=path, cause=cause)


class StoreClosedError(StoreError):
    """The store was shut down; a new one must be opened to write again."""

    reason = "StoreClosed"


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _locked(directory: str, *, exclusive: bool) -> Iterator[None]:
    """Hold ``flock`` on ``<directory>/.lock``; readers of a store that was never
    written (no lock file) read without a lock."""
    path = os.path.join(directory, LOCK_NAME)
    if exclusive:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    else:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise CorruptStoreFileError(path=path, cause=f"expected a number, found {text[:40]!r}")\
            from None
    if value < 0:
        raise CorruptStoreFileError(path=path, cause=f"expected a number >= 0, found {value}")
    return value


def _write_text(path: str, text: str) -> None:
    write_file_atomically(path, text.encode("utf-8"))


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_attempt(directory: str) -> int:
    """The attempt that owns the store in ``directory`` (0 if none was recorded)."""
    value = _read_int(os.path.join(directory, ATTEMPT_NAME))
    return 0 if value is None else value


def advance_attempt(directory: str, attempt: int) -> int:
    """Record ``attempt`` as the store's owner; older attempts are fenced from now on.

    Called by the embedded runner before it starts a driver. Idempotent for the
    current attempt; raises :class:`FencedError` if a newer attempt already
    owns the store (the attempt number never goes backwards).
    """
    with _locked(directory, exclusive=True):
        current = read_attempt(directory)
        if attempt < current:
            raise FencedError(attempt=attempt, current_attempt=current)
        if attempt > current:
            _write_text(os.path.join(directory, ATTEMPT_NAME), f"{attempt}\n")
        return attempt


def _check_fence(directory: str, attempt: int) -> None:
    """Refuse an older attempt; let a newer one take over. Call under the lock."""
    current = read_attempt(directory)
    if attempt < current:
        raise FencedError(attempt=attempt, current_attempt=current)
    if attempt > current:
        _write_text(os.path.join(directory, ATTEMPT_NAME), f"{attempt}\n")


@dataclass(frozen=True)
class _Scan:
    pointers: list[int]
    marked: set[int]


def _scan(directory: str) -> _Scan:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return _Scan(pointers=[], marked=set())
    pointers: list[int] = []
    marked: set[int] = set()
    for name in names:
        match = _POINTER.match(name)
        if match:
            pointers.append(int(match.group(1)))
            continue
        match = _MARKER.match(name)
        if match:
            marked.add(int(match.group(1)))
    return _Scan(pointers=sorted(pointers), marked=marked)


def _read_pointer(directory: str, checkpoint_id: int) -> CompletedCheckpoint:
    path = os.path.join(directory, pointer_name(checkpoint_id))
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError:
        raise CorruptPointerError(checkpoint_id=checkpoint_id, path=path,
                                  cause="the pointer file is not UTF-8 text") from None
    except IsADirectoryError:
        raise CorruptPointerError(checkpoint_id=checkpoint_id, path=path,
                                  cause="a directory is in the pointer's place") from None
    try:
        checkpoint = CompletedCheckpoint.from_json(text)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise CorruptPointerError(
            checkpoint_id=checkpoint_id, path=path,
            cause=f"the pointer file is not a valid checkpoint pointer ({detail})",
        ) from None
    if checkpoint.checkpoint_id != checkpoint_id:
        raise CorruptPointerError(
            checkpoint_id=checkpoint_id, path=path,
            cause=f"the pointer file names checkpoint {checkpoint.checkpoint_id}",
        )
    return checkpoint


def _read_live(directory: str, *, skip_corrupt: bool) -> list[CompletedCheckpoint]:
    scan = _scan(directory)
    result: list[CompletedCheckpoint] = []
    for checkpoint_id in scan.pointers:
        if checkpoint_id in scan.marked:
            continue
        try:
            result.append(_read_pointer(directory, checkpoint_id))
        except FileNotFoundError:
            continue  # removed by a writer that did not take the lock (manual cleanup)
        except CorruptPointerError as exc:
            if not skip_corrupt:
                raise
            _log.warning("skipping %s", exc)
    return result


def list_checkpoints(directory: str, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
    """The retained checkpoints in a file store, oldest first (``cjob checkpoints list``).

    Entries marked for discard are left out. A corrupt pointer raises
    :class:`CorruptPointerError` unless ``skip_corrupt`` (then it is logged).
    A missing directory is an empty store.
    """
    with _locked(directory, exclusive=False):
        return _read_live(directory, skip_corrupt=skip_corrupt)


# --------------------------------------------------------------------------- store


class FileCheckpointStore(CompletedCheckpointStore):
    """Completed-checkpoint pointers as files in ``directory``; see the module docstring.

    ``discard_on_terminal`` decides what :meth:`shutdown` does for a globally
    terminal job (finished or canceled). It defaults to ``False``: the embedded
    runner keeps the checkpoints of a finished job, because a user may want to
    inspect them, restore from them after changing the job, or copy the output
    state; ``cjob`` offers an explicit cleanup instead. Failed and suspended jobs
    always keep their checkpoints: they will be restored.
    """

    def __init__(
        self,
        directory: str,
        *,
        retained: int,
        attempt: int,
        discard_on_terminal: bool = False,
    ) -> None:
        self.directory = os.fspath(directory)
        self.retained = ensure_retained(retained)
        self.attempt = attempt
        self.discard_on_terminal = discard_on_terminal
        self._closed = False

    def __repr__(self) -> str:
        return (f"FileCheckpointStore({self.directory!r}, retained={self.retained}, "
                f"attempt={self.attempt})")

    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        """Commit the pointer, then prune beyond ``retained`` in two phases.

        Marked entries left by a crash or a failing ``discard`` are retried
        first. Returns the checkpoints whose data was deleted by this call.
        """
        self._ensure_open()
        if checkpoint.checkpoint_id < 0:
            raise ValueError(f"checkpoint id must be >= 0, got {checkpoint.checkpoint_id}")
        with _locked(self.directory, exclusive=True):
            _check_fence(self.directory, self.attempt)
            checkpoint_id = checkpoint.checkpoint_id
            try:
                _write_text(self._pointer_path(checkpoint_id), checkpoint.to_json())
            except OSError as exc:
                # The rename may or may not have happened (e.g. fsync failed after
                # it): report an ambiguous write so the caller keeps the data.
                raise AmbiguousWriteError(
                    f"could not commit the pointer of checkpoint {checkpoint_id} in "
                    f"{self.directory}: {exc.strerror or exc}"
                ) from None
            try:
                return self._prune_after_commit(checkpoint_id, discard=discard)
            except OSError as exc:
                # The pointer is committed: the checkpoint stands, whatever pruning met
                # (a full disk, a read-only remount). Raising would make the caller
                # discard the data the new pointer names.
                _log.warning("checkpoint %d is committed but pruning in %s stopped; the next "
                             "add retries: %s", checkpoint_id, self.directory, exc)
                self._pruning_failed()
                return []

    def _prune_after_commit(self, checkpoint_id: int, *,
                            discard: Discarder) -> list[CompletedCheckpoint]:
        # A re-added id is authoritative again: a pending discard must not
        # delete the data it points to.
        _remove(self._marker_path(checkpoint_id))
        scan = _scan(self.directory)
        live = [i for i in scan.pointers if i not in scan.marked]
        for old_id in ids_to_prune(live, retained=self.retained):
            self._mark(old_id)
        return self._discard_marked(discard)

    def latest(self, *, skip_corrupt: bool = False) -> CompletedCheckpoint | None:
        """The newest retained checkpoint; see :func:`list_checkpoints` for ``skip_corrupt``."""
        checkpoints = self.all(skip_corrupt=skip_corrupt)
        return checkpoints[-1] if checkpoints else None

    def all(self, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
        """Every retained checkpoint not marked for discard, oldest first."""
        return list_checkpoints(self.directory, skip_corrupt=skip_corrupt)

    def marked_for_discard(self) -> list[int]:
        """Ids whose pointer is marked but whose data may not be deleted yet."""
        with _locked(self.directory, exclusive=False):
            scan = _scan(self.directory)
            return sorted(i for i in scan.marked if i in scan.pointers)

    def shutdown(self, status: JobStatus, *, discard: Discarder) -> None:
        """Close the store; discard everything only for a globally terminal job
        and only when ``discard_on_terminal`` was asked for. The counter and
        the attempt file always stay, so ids never repeat."""
        if self._closed:
            return
        if status.is_globally_terminal and self.discard_on_terminal:
            with _locked(self.directory, exclusive=True):
                _check_fence(self.directory, self.attempt)
                for checkpoint_id in _scan(self.directory).pointers:
                    self._mark(checkpoint_id)
                self._discard_marked(discard, keep_newest=False)
        self._closed = True

    def _write_restore_report(self, text: str, *, attempt: int) -> None:
        """Replace the ``restored`` file under the lock, after the fence check."""
        if attempt != self.attempt:
            raise ValueError(f"a store of attempt {self.attempt} records only its own "
                             f"restore, not attempt {attempt}'s")
        with _locked(self.directory, exclusive=True):
            _check_fence(self.directory, self.attempt)
            _write_text(os.path.join(self.directory, RESTORED_NAME), text)

    def _read_restore_report(self) -> str | None:
        with _locked(self.directory, exclusive=False):
            try:
                with open(os.path.join(self.directory, RESTORED_NAME), encoding="utf-8") as f:
                    return f.read()
            except FileNotFoundError:
                return None

    # ------------------------------------------------------------------ internals

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the checkpoint store in {self.directory} was shut down")

    def _pointer_path(self, checkpoint_id: int) -> str:
        return os.path.join(self.directory, pointer_name(checkpoint_id))

    def _marker_path(self, checkpoint_id: int) -> str:
        return os.path.join(self.directory, pointer_name(checkpoint_id) + MARKER_SUFFIX)

    def _mark(self, checkpoint_id: int) -> None:
        _write_text(self._marker_path(checkpoint_id), json.dumps({"attempt": self.attempt}))

    def _discard_marked(
        self, discard: Discarder, *, keep_newest: bool = True
    ) -> list[CompletedCheckpoint]:
        """Phase two for every marked entry: delete data, remove pointer, remove marker.

        Called under the exclusive lock after the fence check. With
        ``keep_newest`` the newest pointer is unmarked instead of discarded, a
        guard against markers left by an interrupted discard-everything shutdown.
        """
        scan = _scan(self.directory)
        discarded: list[CompletedCheckpoint] = []
        newest = scan.pointers[-1] if scan.pointers else None
        for checkpoint_id in sorted(scan.marked):
            if checkpoint_id not in scan.pointers:
                _remove(self._marker_path(checkpoint_id))  # pointer already gone
                continue
            if keep_newest and checkpoint_id == newest:
                _log.warning("not discarding checkpoint %d: it is the newest", checkpoint_id)
                _remove(self._marker_path(checkpoint_id))
                continue
            try:
                checkpoint = _read_pointer(self.directory, checkpoint_id)
            except CorruptPointerError as exc:
                _log.warning("removing a corrupt pointer without deleting data: %s", exc)
                _remove(self._pointer_path(checkpoint_id))
                _remove(self._marker_path(checkpoint_id))
                continue
            try:
                discard(checkpoint)
            except Exception as exc:
                _log.warning(
                    "could not delete the data of checkpoint %d (%s); it stays marked and is "
                    "retried on the next add: %s",
                    checkpoint_id, checkpoint.metadata_path, exc,
                )
                self._pruning_failed()
                continue
            _remove(self._pointer_path(checkpoint_id))
            _remove(self._marker_path(checkpoint_id))
            discarded.append(checkpoint)
        return discarded


# --------------------------------------------------------------------------- counter


class FileCheckpointIdCounter(CheckpointIdCounter):
    """The next checkpoint id in ``<directory>/counter``, fenced like the store.

    The counter never goes backwards: it is at least one more than the newest
    pointer in the directory, so losing the ``counter`` file cannot reuse ids.
    """

    def __init__(self, directory: str, *, attempt: int, start: int = 1) -> None:
        self.directory = os.fspath(directory)
        self.attempt = attempt
        self.start = start

    def __repr__(self) -> str:
        return f"FileCheckpointIdCounter({self.directory!r}, attempt={self.attempt})"

    def _current(self) -> int:
        stored = _read_int(os.path.join(self.directory, COUNTER_NAME))
        pointers = _scan(self.directory).pointers
        floor = pointers[-1] + 1 if pointers else self.start
        return max(self.start, floor, stored if stored is not None else self.start)

    def get_and_increment(self) -> int:
        with _locked(self.directory, exclusive=True):
            _check_fence(self.directory, self.attempt)
            value = self._current()
            _write_text(os.path.join(self.directory, COUNTER_NAME), f"{value + 1}\n")
            return value

    def get(self) -> int:
        with _locked(self.directory, exclusive=False):
            return self._current()

    def set_count(self, count: int) -> None:
        with _locked(self.directory, exclusive=True):
            _check_fence(self.directory, self.attempt)
            if count > self._current():
                _write_text(os.path.join(self.directory, COUNTER_NAME), f"{count}\n")


def is_store_directory(directory: str) -> bool:
    """Whether ``directory`` looks like a file store (has a lock, counter or pointer)."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise
    return any(
        name in (LOCK_NAME, COUNTER_NAME, ATTEMPT_NAME) or _POINTER.match(name) for name in names
    )
