"""Whether a failing attempt was fenced: then that, not its failure, is why it stops.

A driver whose node was cut off runs on unseen while the operator starts the next
attempt, which takes the store's fence. The old driver meets the fence at its next
fenced write (a commit, an id), but often something else ends it first: its
checkpoints fail (the next attempt owns the storage now) until the failure budget is
spent, or none completes and the stall watch fires. Its exit code and its last log
line should still say it was fenced, the cause the operator and a reader act on.

It may not even be able to read the fence. The operator force-deletes the pod of a
driver whose node it lost, before the next attempt takes the fence; deleting the pod
revokes the token bound to it, so the API server refuses the old driver's identity
(HTTP 401) from then on. A driver that had been writing its store and is now refused
its identity was replaced: that refusal is the fence, as the driver can see it. A 403
is not: the identity is known and lacks a right, a setup mistake that no newer
attempt explains.
"""

from __future__ import annotations

import logging

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.completed_store import (
    CompletedCheckpointStore,
    FencedError,
    StoreError,
)
from cjob_checkpoint.store.configmap_errors import StoreAccessDeniedError

log = logging.getLogger(__name__)

REVOKED_STATUS = 401
"""The API server's answer to a token it no longer accepts (its pod was deleted)."""


@keyword_error
class AttemptRevokedError(StoreError):
    """The API server no longer accepts this attempt's identity: its pod was deleted,
    as the operator deletes the pod of an attempt it replaces. Ends the driver as
    fenced (the fence itself can no longer be read)."""

    reason = "Fenced"
    attempt: int
    refusal: str

    def describe(self) -> str:
        return (f"attempt {self.attempt} was replaced: the API server no longer accepts "
                f"its identity ({self.refusal}), as when the operator deletes the pod of "
                f"an attempt it replaces")


def fenced_instead(outcome: BaseException, *, store: CompletedCheckpointStore,
                   attempt: int) -> BaseException:
    """``outcome``, or the :class:`FencedError` of a newer attempt that owns the store
    (an :class:`AttemptRevokedError` when the store refuses this attempt's identity).

    One read of the store; when it cannot be read otherwise, the failure stays as it
    was (the attempt is ending anyway, and guessing would misreport a real failure).
    """
    if isinstance(outcome, FencedError):
        return outcome
    try:
        store.check_fence()
    except FencedError as fenced:
        log.warning("this attempt failed (%s) after a newer attempt took the store over",
                    outcome)
        return fenced
    except StoreAccessDeniedError as refused:
        if refused.status != REVOKED_STATUS:
            log.warning("could not read whether a newer attempt owns the store: %s", refused)
            return outcome
        revoked = AttemptRevokedError(attempt=attempt,
                                      refusal=f"HTTP {refused.status}: {refused.message}")
        log.warning("this attempt failed (%s); %s", outcome, revoked)
        return revoked
    except Exception as exc:
        log.warning("could not read whether a newer attempt owns the store: %s", exc)
    return outcome
