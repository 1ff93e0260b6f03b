"""The file-based completed-checkpoint store: the embedded runner's default.

One directory (next to ``status.json`` in the embedded runner's state dir)
holds, with the same names as the ConfigMap store's keys::

    checkpointID-0000000000000000042             pointer: CompletedCheckpoint JSON
    checkpointID-0000000000000000041.discarding  discard marker (two-phase prune)
    counter                                      next checkpoint id
    attempt                                      fence: the attempt that owns the store
    restored                                     what the current attempt restored
    staged-inputs                                the published staged inputs
    holds                                        checkpoints pruning must skip (holds)
    .lock                                        flock(2) target

:class:`FileBackend` reads the directory as one state under a shared ``flock``
on ``.lock``, and swaps it under the exclusive lock after checking that nothing
changed since the read (the version is a digest of what was read), so a
compare-and-swap is atomic between processes. Every file is replaced with an
atomic rename, in an order that leaves a readable store after a crash: the
fence and counter first, new pointers before markers, removed pointers before
their markers. The rules (fencing, retention, two-phase pruning) are those of
:mod:`cjob_checkpoint.store.backed`.

Fencing: before it starts a driver the embedded runner calls
:func:`advance_attempt`. A store or counter opened with an older ``attempt`` is
refused with :class:`FencedError` on every write, so a zombie driver of a
previous attempt cannot add or prune checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.storage.local import write_file_atomically
from cjob_checkpoint.store.backed import (
    BackedCheckpointIdCounter,
    BackedCheckpointStore,
    advance_fence,
    readable,
)
from cjob_checkpoint.store.backend import RetryPolicy, SwapConflictError, read_state
from cjob_checkpoint.store.completed_store import (
    AmbiguousWriteError,
    CompletedCheckpoint,
    CorruptPointerError,
    StoreClosedError,
    StoreError,
)
from cjob_checkpoint.store.state import StoreState
from cjob_spec.names import CHECKPOINT_POINTER_NAME, CONFIGMAP_CHECKPOINT_KEY_FORMAT

__all__ = [
    "CorruptPointerError",
    "CorruptStoreFileError",
    "FileBackend",
    "FileCheckpointIdCounter",
    "FileCheckpointStore",
    "StoreClosedError",
    "advance_attempt",
    "list_checkpoints",
    "pointer_name",
    "read_attempt",
]

LOCK_NAME = ".lock"
ATTEMPT_NAME = "attempt"
COUNTER_NAME = "counter"
RESTORED_NAME = "restored"
STAGED_INPUTS_NAME = "staged-inputs"
HOLDS_NAME = "holds"
MARKER_SUFFIX = ".discarding"
_POINTER = CHECKPOINT_POINTER_NAME
_MARKER = re.compile(r"^checkpointID-(\d{19})\.discarding$")


def pointer_name(checkpoint_id: int) -> str:
    """``checkpointID-%019d``: the file name (and ConfigMap key) of a pointer."""
    return CONFIGMAP_CHECKPOINT_KEY_FORMAT % checkpoint_id


@keyword_error
class CorruptStoreFileError(StoreError):
    """The ``counter`` or ``attempt`` file does not hold a number.

    Never repaired silently: guessing a counter could reuse checkpoint ids, and
    guessing the attempt could let a zombie writer in.
    """

    reason = "CorruptStoreFile"
    path: str
    cause: str

    def describe(self) -> str:
        return f"{self.path} is corrupt: {self.cause}; fix or remove it by hand"


# --------------------------------------------------------------------------- files


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


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write_text(path: str, text: str) -> None:
    write_file_atomically(path, text.encode("utf-8"))


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_attempt(directory: str) -> int:
    """The attempt that owns the store in ``directory`` (0 if none was recorded)."""
    value = _read_int(os.path.join(directory, ATTEMPT_NAME))
    return 0 if value is None else value


def _digest(state: StoreState) -> str:
    """The version of a file store: what it holds, so any change moves it."""
    content = json.dumps([state.fence, state.counter, sorted(state.pointers.items()),
                          sorted(state.unreadable.items()), sorted(state.markers.items()),
                          state.restore_report, state.staged_inputs, state.holds])
    return hashlib.sha256(content.encode("utf-8", "surrogateescape")).hexdigest()


# --------------------------------------------------------------------------- backend


class FileBackend:
    """A store's state as files in ``directory``; see the module docstring."""

    retry_policy = RetryPolicy(max_attempts=200, deadline=60.0)

    def __init__(self, directory: str) -> None:
        self.directory = os.fspath(directory)

    def __repr__(self) -> str:
        return f"FileBackend({self.directory!r})"

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def locate(self, checkpoint_id: int) -> str:
        return self._path(pointer_name(checkpoint_id))

    def _marker_path(self, checkpoint_id: int) -> str:
        return self._path(pointer_name(checkpoint_id) + MARKER_SUFFIX)

    def read(self) -> StoreState:
        with _locked(self.directory, exclusive=False):
            return self._read_unlocked()

    def _read_unlocked(self) -> StoreState:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        pointers: dict[int, str] = {}
        unreadable: dict[int, str] = {}
        markers: dict[int, str] = {}
        for name in names:
            if match := _POINTER.match(name):
                checkpoint_id = int(match.group(1))
                try:
                    pointers[checkpoint_id] = _read_text(self._path(name))
                except FileNotFoundError:
                    continue  # removed by a writer that did not take the lock (by hand)
                except UnicodeDecodeError:
                    unreadable[checkpoint_id] = "the pointer file is not UTF-8 text"
                except IsADirectoryError:
                    unreadable[checkpoint_id] = "a directory is in the pointer's place"
            elif match := _MARKER.match(name):
                try:
                    markers[int(match.group(1))] = _read_text(self._path(name))
                except FileNotFoundError:
                    continue
                except (UnicodeDecodeError, IsADirectoryError):
                    markers[int(match.group(1))] = ""  # a marker marks, whatever it says
        report = self._read_document(RESTORED_NAME)
        staged = self._read_document(STAGED_INPUTS_NAME)
        holds = self._read_document(HOLDS_NAME)
        state = StoreState(version="", fence=read_attempt(self.directory),
                           counter=_read_int(self._path(COUNTER_NAME)), pointers=pointers,
                           unreadable=unreadable, markers=markers, restore_report=report,
                           staged_inputs=staged, holds=holds)
        return dataclasses.replace(state, version=_digest(state))

    def _read_document(self, name: str) -> str | None:
        """A record kept whole in one file (restore report, staged inputs, holds):
        ``None`` when absent, ``""`` when undecodable (its reader then refuses it)."""
        try:
            return _read_text(self._path(name))
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, IsADirectoryError):
            return ""

    def compare_and_swap(self, *, expected: StoreState, new: StoreState,
                         operation: str) -> StoreState:
        with _locked(self.directory, exclusive=True):
            current = self._read_unlocked()
            if current.version != expected.version:
                raise SwapConflictError(operation)
            try:
                self._apply(current, new)
            except OSError as exc:
                # A rename may or may not have happened (e.g. fsync failed after it).
                raise AmbiguousWriteError(
                    f"could not {operation} in {self.directory}: {exc.strerror or exc}"
                ) from None
        written = dataclasses.replace(new, origin=None)
        return dataclasses.replace(written, version=_digest(written))

    def _apply(self, current: StoreState, new: StoreState) -> None:
        """Write the difference, in the crash-safe order of the module docstring."""
        if new.fence != current.fence:
            _write_text(self._path(ATTEMPT_NAME), f"{new.fence}\n")
        if new.counter is not None and new.counter != current.counter:
            _write_text(self._path(COUNTER_NAME), f"{new.counter}\n")
        for checkpoint_id, text in sorted(new.pointers.items()):
            if current.pointers.get(checkpoint_id) != text:
                _write_text(self.locate(checkpoint_id), text)
        for checkpoint_id, text in sorted(new.markers.items()):
            if current.markers.get(checkpoint_id) != text:
                _write_text(self._marker_path(checkpoint_id), text)
        kept = set(new.pointer_ids())
        for checkpoint_id in current.pointer_ids():
            if checkpoint_id not in kept:
                _remove(self.locate(checkpoint_id))
        for checkpoint_id in current.markers:
            if checkpoint_id not in new.markers:
                _remove(self._marker_path(checkpoint_id))
        if new.restore_report != current.restore_report:
            if new.restore_report is None:
                _remove(self._path(RESTORED_NAME))
            else:
                _write_text(self._path(RESTORED_NAME), new.restore_report)
        if new.staged_inputs != current.staged_inputs:
            if new.staged_inputs is None:
                _remove(self._path(STAGED_INPUTS_NAME))
            else:
                _write_text(self._path(STAGED_INPUTS_NAME), new.staged_inputs)
        if new.holds != current.holds:
            if new.holds is None:
                _remove(self._path(HOLDS_NAME))
            else:
                _write_text(self._path(HOLDS_NAME), new.holds)

    def check_budget(self, state: StoreState) -> None:
        return None

    def gave_up(self, *, operation: str, conflicts: bool, attempts: int,
                cause: str) -> StoreError:
        return StoreError(f"could not {operation} in {self.directory} after {attempts} tries "
                          f"({cause})")


def advance_attempt(directory: str, attempt: int) -> int:
    """Record ``attempt`` as the store's owner; older attempts are fenced from now on.

    Called by the embedded runner before it starts a driver. Idempotent for the
    current attempt; raises :class:`FencedError` if a newer attempt already
    owns the store (the attempt number never goes backwards).
    """
    return advance_fence(FileBackend(directory), attempt, where=os.fspath(directory))


def list_checkpoints(directory: str, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
    """The retained checkpoints in a file store, oldest first (``cjob checkpoints list``).

    Entries marked for discard are left out. A corrupt pointer raises
    :class:`CorruptPointerError` unless ``skip_corrupt`` (then it is logged).
    A missing directory is an empty store.
    """
    backend = FileBackend(directory)
    state = read_state(backend, where=backend.directory)
    return readable(state.live_pointers(locate=backend.locate), skip_corrupt=skip_corrupt)


# --------------------------------------------------------------------------- store, counter


class FileCheckpointStore(BackedCheckpointStore):
    """Completed-checkpoint pointers as files in ``directory``.

    ``discard_on_terminal`` defaults to ``False``: the embedded runner keeps the
    checkpoints of a finished job, because a user may want to inspect them,
    restore from them after changing the job, or copy the output state; ``cjob``
    offers an explicit cleanup instead.
    """

    def __init__(self, directory: str, *, retained: int, attempt: int,
                 discard_on_terminal: bool = False) -> None:
        self.directory = os.fspath(directory)
        super().__init__(backend=FileBackend(self.directory), where=self.directory,
                         retained=retained, attempt=attempt,
                         discard_on_terminal=discard_on_terminal)

    def __repr__(self) -> str:
        return (f"FileCheckpointStore({self.directory!r}, retained={self.retained}, "
                f"attempt={self.attempt})")

    def marked_for_discard(self) -> list[int]:
        return self.marked_ids()


class FileCheckpointIdCounter(BackedCheckpointIdCounter):
    """The next checkpoint id in ``<directory>/counter``, fenced like the store."""

    def __init__(self, directory: str, *, attempt: int, start: int = 1) -> None:
        self.directory = os.fspath(directory)
        super().__init__(backend=FileBackend(self.directory), where=self.directory,
                         attempt=attempt, start=start)

    def __repr__(self) -> str:
        return f"FileCheckpointIdCounter({self.directory!r}, attempt={self.attempt})"
