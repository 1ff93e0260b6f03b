"""The one completed-checkpoint store and id counter, over any :class:`StoreBackend`.

How the rules of :mod:`cjob_checkpoint.store.completed_store` are kept, whatever the backend:

* **Compare-and-swap.** Every change reads the state and swaps it in with the
  version it read; a lost swap is recomputed from a fresh read, so two writers
  never lose each other's pointers.
* **Fencing inside the swap.** The fence is checked on the very state being
  replaced, so a writer of an older attempt (a zombie driver) cannot add, prune
  or take an id once the fence moved, even if it read a moment before. A writer
  of a *newer* attempt takes the fence over in the same swap (attempt numbers
  come only from the supervisor).
* **Add, then prune in two phases.** The pointer is committed first; then the
  checkpoints beyond ``retained`` (never the newest) are marked, their data
  deleted through the ``discard`` callback, and finally pointer and marker
  removed. Readers skip marked pointers. A failed deletion or a crash leaves the
  marker, and the next add retries.
* **Ambiguity.** When a commit's outcome is unknown, :class:`AmbiguousWriteError`
  is raised and nothing is deleted; the next add reads what actually landed.
* **Holds.** A checkpoint someone is copying (a snapshot) is held: pruning skips
  it until the holder lets go (:mod:`cjob_checkpoint.store.holds`).
* **First publication wins.** A staged input is published in a fenced swap that
  adds it only while its name is free, decided again on every fresh read; a lost
  race or a lost answer reads the winner back.
* **Size.** Commits, restore reports and publications are checked against the
  backend's budget before they are swapped in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from cjob_checkpoint.store.backend import Change, StoreBackend, read_state, update_state
from cjob_checkpoint.store.completed_store import (
    CheckpointIdCounter,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    CorruptPointerError,
    Discarder,
    FencedError,
    JobOutcome,
    StoreClosedError,
)
from cjob_checkpoint.store.holds import CheckpointHold, CheckpointHolds, UnreadableHoldsError
from cjob_checkpoint.store.restorable import MetadataReader, first_readable
from cjob_checkpoint.store.retention import ensure_retained, ids_to_prune
from cjob_checkpoint.store.staged_inputs import StagedInput, StagedInputFencedError, StagedInputs
from cjob_checkpoint.store.state import StoreDraft, StoreState

__all__ = [
    "BackedCheckpointIdCounter",
    "BackedCheckpointStore",
    "advance_fence",
    "held_ids",
    "hold_checkpoint",
    "readable",
    "release_checkpoint",
    "take_fence",
]

_log = logging.getLogger(__name__)


def take_fence(draft: StoreDraft, attempt: int, *, where: str) -> bool:
    """Refuse an older attempt; a newer one takes the fence over. Returns whether it moved."""
    if attempt < draft.fence:
        raise FencedError(attempt=attempt, current_attempt=draft.fence)
    if attempt > draft.fence:
        _log.info("attempt %d takes the fence of %s over from attempt %d",
                  attempt, where, draft.fence)
        draft.fence = attempt
        return True
    return False


def advance_fence(backend: StoreBackend, attempt: int, *, where: str) -> int:
    """Make ``attempt`` the only attempt allowed to write; older writers are fenced.

    Idempotent for the current attempt; never moves the fence backwards (an older
    ``attempt`` raises :class:`FencedError`). A lost answer is retried: setting the
    same value twice is harmless.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    update_state(backend, lambda draft: take_fence(draft, attempt, where=where),
                 operation="advance the fence", where=where, retry_ambiguous=True)
    return attempt


def held_ids(draft: StoreDraft, *, where: str) -> frozenset[int] | None:
    """The ids a holder keeps from pruning; ``None`` (prune nothing) when the record of
    holds cannot be read: a guess could delete the checkpoint a copy is reading."""
    try:
        return CheckpointHolds.decode(draft.holds).held_ids()
    except UnreadableHoldsError as exc:
        _log.warning("not pruning checkpoints of %s: %s", where, exc)
        return None


def hold_checkpoint(backend: StoreBackend, *, where: str, checkpoint_id: int, holder: str,
                    by: str) -> bool:
    """Keep checkpoint ``checkpoint_id`` from being pruned until ``holder`` releases it.

    Succeeds (``True``) only while the checkpoint is live: not marked for discard,
    not gone. A holder holds one checkpoint; holding another replaces its hold.
    Not fenced (see :mod:`cjob_checkpoint.store.holds`); decided again on every
    fresh read, so a lost answer is simply retried.
    """
    held = False

    def change(draft: StoreDraft) -> bool:
        nonlocal held
        holds = CheckpointHolds.decode(draft.holds)
        held = checkpoint_id in draft.state.live_ids()
        if not held:
            return False
        current = holds.of(holder)
        if current is not None and current.checkpoint_id == checkpoint_id:
            return False
        draft.holds = holds.with_hold(
            CheckpointHold(holder=holder, checkpoint_id=checkpoint_id, by=by)).encode()
        return True

    update_state(backend, change, operation=f"hold checkpoint {checkpoint_id} for {by}",
                 where=where, retry_ambiguous=True)
    return held


def release_checkpoint(backend: StoreBackend, *, where: str, holder: str) -> bool:
    """Let go of ``holder``'s hold; returns whether there was one. The checkpoint goes
    at the next prune, if it is beyond ``retained`` by then."""
    released = False

    def change(draft: StoreDraft) -> bool:
        nonlocal released
        holds = CheckpointHolds.decode(draft.holds)
        released = holds.of(holder) is not None
        if released:
            draft.holds = holds.without(holder).encode()
        return released

    update_state(backend, change, operation=f"release the checkpoint hold of {holder}",
                 where=where, retry_ambiguous=True)
    return released


def readable(entries: list[CompletedCheckpoint | CorruptPointerError], *,
             skip_corrupt: bool) -> list[CompletedCheckpoint]:
    """The decoded pointers; the first damaged one raises unless ``skip_corrupt``
    (then each is logged and left out)."""
    result: list[CompletedCheckpoint] = []
    for entry in entries:
        if isinstance(entry, CompletedCheckpoint):
            result.append(entry)
        elif not skip_corrupt:
            raise entry
        else:
            _log.warning("skipping %s", entry)
    return result


class BackedCheckpointStore(CompletedCheckpointStore):
    """Completed-checkpoint pointers kept by ``backend``; see the module docstring.

    ``discard_on_terminal`` decides what :meth:`shutdown` does for a globally
    terminal job (finished or canceled). It defaults to ``False``: a finished
    job may still be inspected or restored after a change, and the supervisor's
    cleanup decides about its data. Failed and suspended jobs always keep their
    checkpoints: they will be restored.
    """

    def __init__(
        self,
        *,
        backend: StoreBackend,
        where: str,
        retained: int,
        attempt: int,
        discard_on_terminal: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.where = where
        self.retained = ensure_retained(retained)
        self.attempt = attempt
        self.discard_on_terminal = discard_on_terminal
        self.clock = clock
        self._closed = False

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.where}, retained={self.retained}, "
                f"attempt={self.attempt})")

    # ------------------------------------------------------------------ reads

    def read_state(self) -> StoreState:
        """One consistent reading of the whole store."""
        return read_state(self.backend, where=self.where)

    def retained_pointers(self) -> list[CompletedCheckpoint | CorruptPointerError]:
        return self.read_state().live_pointers(locate=self.backend.locate)

    def all(self, *, skip_corrupt: bool = False) -> list[CompletedCheckpoint]:
        return readable(self.retained_pointers(), skip_corrupt=skip_corrupt)

    def latest_restorable(
        self, *, storage_reader: MetadataReader, fallback: bool
    ) -> tuple[CompletedCheckpoint | None, list[str]]:
        """The newest checkpoint whose ``_metadata`` reads, and notes on what was skipped.

        ``storage_reader`` reads a ``_metadata`` URI (for example
        :func:`cjob_checkpoint.checkpoint_storage.read_metadata`). The walk, its
        fallback and its errors are those of
        :func:`~cjob_checkpoint.store.restorable.first_readable`, which the driver's
        restore resolution uses too; damaged pointers count as unreadable. An empty
        store gives ``(None, [])``.
        """
        chosen = first_readable(reversed(self.retained_pointers()), read=storage_reader,
                                fallback=fallback)
        return chosen.checkpoint, chosen.notes

    def check_fence(self) -> None:
        fence = self.read_state().fence
        if self.attempt < fence:
            raise FencedError(attempt=self.attempt, current_attempt=fence)

    def marked_ids(self) -> list[int]:
        """Ids whose pointer is marked but whose data may not be deleted yet."""
        return self.read_state().marked_pointer_ids()

    def marked_checkpoints(self) -> list[CompletedCheckpoint]:
        """The checkpoints of :meth:`marked_ids` (a damaged pointer raises)."""
        state = self.read_state()
        return [state.pointer(i, locate=self.backend.locate) for i in state.marked_pointer_ids()]

    # ------------------------------------------------------------------ writes

    def _update(self, change: Change, *, operation: str,
                retry_ambiguous: bool = False) -> StoreState:
        return update_state(self.backend, change, operation=operation, where=self.where,
                            retry_ambiguous=retry_ambiguous)

    def _fence(self, draft: StoreDraft) -> bool:
        return take_fence(draft, self.attempt, where=self.where)

    def add_checkpoint_and_subsume_oldest(
        self, checkpoint: CompletedCheckpoint, *, discard: Discarder
    ) -> list[CompletedCheckpoint]:
        """Commit the pointer, then prune beyond ``retained`` in two phases.

        Raises :class:`FencedError` for an older attempt, :class:`StoreFullError`
        over the budget, and :class:`AmbiguousWriteError` when the commit's outcome
        is unknown (nothing is discarded then). Once the pointer is committed, a
        pruning step that fails for any reason is logged and counted in
        ``prune_failures``: the committed checkpoint stands and the next add
        prunes; only :class:`FencedError` is raised, and it deletes nothing.
        Returns the checkpoints whose data this call deleted.
        """
        self._ensure_open()
        if checkpoint.checkpoint_id < 0:
            raise ValueError(f"checkpoint id must be >= 0, got {checkpoint.checkpoint_id}")
        self._commit(checkpoint)
        try:
            return self.prune(discard=discard)
        except FencedError:
            raise
        except Exception as exc:
            _log.warning("checkpoint %d is committed but pruning in %s stopped (%s); the next "
                         "add retries", checkpoint.checkpoint_id, self.where, exc)
            self._pruning_failed()
            return []

    def _commit(self, checkpoint: CompletedCheckpoint) -> None:
        text = checkpoint.to_json()
        checkpoint_id = checkpoint.checkpoint_id

        def change(draft: StoreDraft) -> bool:
            moved = self._fence(draft)
            if draft.pointers.get(checkpoint_id) == text and checkpoint_id not in draft.markers:
                # Already there: an earlier write landed although its answer was lost.
                return moved
            draft.put_pointer(checkpoint)
            self.backend.check_budget(draft.freeze())
            return True

        self._update(change, operation=f"commit the pointer of checkpoint {checkpoint_id}")

    def prune(self, *, discard: Discarder) -> list[CompletedCheckpoint]:
        """Discard the checkpoints beyond ``retained`` and any left marked before.

        Phase one marks them (a fenced swap), phase two deletes their data through
        ``discard``, phase three removes pointer and marker (fenced again). A
        ``discard`` that raises leaves its checkpoint marked for the next call.
        Returns the checkpoints whose data was deleted.
        """
        self._ensure_open()
        return self._prune(discard=discard, keep=self.retained)

    def _prune(self, *, discard: Discarder, keep: int) -> list[CompletedCheckpoint]:
        now = self.clock()

        def mark(draft: StoreDraft) -> bool:
            changed = self._fence(draft)
            pointers = draft.state.pointer_ids()
            if keep > 0 and pointers and pointers[-1] in draft.markers:
                # Never discard the newest: a marker on it can only be left over
                # from an interrupted discard-everything shutdown.
                _log.warning("unmarking checkpoint %d of %s: it is the newest",
                             pointers[-1], self.where)
                draft.unmark(pointers[-1])
                changed = True
            live = draft.state.live_ids()
            held = held_ids(draft, where=self.where)
            if held is None:
                return changed
            for checkpoint_id in ids_to_prune(live, retained=keep) if keep > 0 else live:
                if checkpoint_id in held:
                    continue  # a copy is reading it: pruned after its holder lets go
                draft.mark(checkpoint_id, attempt=self.attempt, at=now)
                changed = True
            return changed

        marked = self._update(mark, operation="mark checkpoints for discard")
        pointers = set(marked.pointer_ids())
        removable = sorted(set(marked.markers) - pointers)  # markers whose pointer is gone
        discarded: list[CompletedCheckpoint] = []
        for checkpoint_id in marked.marked_pointer_ids():
            try:
                checkpoint = marked.pointer(checkpoint_id, locate=self.backend.locate)
            except CorruptPointerError as exc:
                _log.warning("removing a damaged pointer without deleting data: %s", exc)
                removable.append(checkpoint_id)
                continue
            try:
                discard(checkpoint)
            except Exception as exc:
                _log.warning(
                    "could not delete the data of checkpoint %d (%s); it stays marked and is "
                    "retried on the next add: %s",
                    checkpoint_id, checkpoint.metadata_path, exc)
                self._pruning_failed()
                continue
            removable.append(checkpoint_id)
            discarded.append(checkpoint)
        if not removable:
            return discarded

        def remove(draft: StoreDraft) -> bool:
            changed = self._fence(draft)
            for checkpoint_id in removable:
                # Only while still marked: a re-add in between removed the marker.
                if checkpoint_id in draft.markers:
                    draft.remove_pointer(checkpoint_id)
                    changed = True
            return changed

        self._update(remove, operation="remove discarded checkpoints")
        return discarded

    def shutdown(self, status: JobOutcome, *, discard: Discarder) -> None:
        """Close the store; the checkpoints stay unless asked otherwise.

        Only a globally terminal job with ``discard_on_terminal`` discards
        everything (newest included). The counter and the fence always stay, so
        ids never repeat and zombies stay fenced.
        """
        if self._closed:
            return
        self._discard_if_terminal(status, discard=discard)
        self._closed = True

    def _discard_if_terminal(self, status: JobOutcome, *, discard: Discarder) -> None:
        if status.is_globally_terminal and self.discard_on_terminal:
            self._prune(discard=discard, keep=0)

    def _write_restore_report(self, text: str, *, attempt: int) -> None:
        """A fenced swap, decided again on every fresh read (fence, then
        equal-or-replace), so a lost answer is simply retried and a conflict with a
        concurrent commit costs one more round trip and never undoes that commit."""
        if attempt != self.attempt:
            raise ValueError(f"a store of attempt {self.attempt} records only its own "
                             f"restore, not attempt {attempt}'s")

        def change(draft: StoreDraft) -> bool:
            moved = self._fence(draft)
            if draft.restore_report == text:
                return moved
            draft.restore_report = text
            self.backend.check_budget(draft.freeze())
            return True

        self._update(change, operation="record the restored checkpoint", retry_ambiguous=True)

    def _read_restore_report(self) -> str | None:
        return self.read_state().restore_report

    def publish_staged_input(self, candidate: StagedInput) -> StagedInput:
        """Publish ``candidate`` unless an input of its name is published; returns the
        published one, which is the job's input of that name for good.

        Only the attempt that owns the store publishes: an older one raises
        :class:`StagedInputFencedError` (a :class:`FencedError`) whether or not the
        name is taken, since it is about to be fenced anyway. The first publication
        wins: the input a checkpoint's positions point into must never change under a
        restore. One fenced swap adds the record only while the name is free; the
        winner is read from the state as swapped or as found, so a lost race or a lost
        answer (retried) reads it back.
        """
        name = candidate.name

        def change(draft: StoreDraft) -> bool:
            try:
                moved = self._fence(draft)
            except FencedError as exc:
                raise StagedInputFencedError(attempt=exc.attempt,
                                             current_attempt=exc.current_attempt,
                                             name=name) from None
            published = StagedInputs.decode(draft.staged_inputs)
            if published.get(name) is not None:
                return moved
            draft.staged_inputs = published.with_input(candidate).encode()
            self.backend.check_budget(draft.freeze())
            return True

        state = self._update(change, operation=f"publish the staged input {name!r}",
                             retry_ambiguous=True)
        winner = StagedInputs.decode(state.staged_inputs).get(name)
        assert winner is not None, "a publication that succeeded names its input"
        if winner != candidate:
            _log.info("the staged input %r of attempt %d is not used: attempt %d published "
                      "%s first", name, candidate.attempt, winner.attempt, winner.uri)
        return winner

    def staged_input(self, name: str) -> StagedInput | None:
        """The published input ``name``, if any (no fence: reading is harmless)."""
        return StagedInputs.decode(self.read_state().staged_inputs).get(name)

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the checkpoint store {self.where} was shut down")


class BackedCheckpointIdCounter(CheckpointIdCounter):
    """The next checkpoint id, kept by ``backend`` and fenced like the store.

    Every increment is a compare-and-swap. The counter never goes backwards and is
    at least one more than the newest pointer (marked or not), so losing the
    counter cannot reuse an id. An increment whose answer is lost is retried from
    a fresh read: at worst an id is skipped, which is harmless.
    """

    def __init__(self, *, backend: StoreBackend, where: str, attempt: int,
                 start: int = 1) -> None:
        self.backend = backend
        self.where = where
        self.attempt = attempt
        self.start = start

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where}, attempt={self.attempt})"

    def _update(self, change: Change, *, operation: str) -> StoreState:
        return update_state(self.backend, change, operation=operation, where=self.where,
                            retry_ambiguous=True)

    def get_and_increment(self) -> int:
        taken: list[int] = []

        def change(draft: StoreDraft) -> bool:
            take_fence(draft, self.attempt, where=self.where)
            value = draft.state.next_checkpoint_id(start=self.start)
            draft.counter = value + 1
            taken[:] = [value]
            return True

        self._update(change, operation="increment the checkpoint counter")
        return taken[0]

    def get(self) -> int:
        return read_state(self.backend, where=self.where).next_checkpoint_id(start=self.start)

    def set_count(self, count: int) -> None:
        def change(draft: StoreDraft) -> bool:
            moved = take_fence(draft, self.attempt, where=self.where)
            if count > draft.state.next_checkpoint_id(start=self.start):
                draft.counter = count
                return True
            return moved

        self._update(change, operation="move the checkpoint counter forward")
