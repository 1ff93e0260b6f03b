"""Whether a failing attempt was fenced: then that, not its failure, is why it stops.

A driver whose node was cut off runs on unseen while the operator starts the next
attempt, which takes the store's fence. The old driver meets the fence at its next
fenced write (a commit, an id), but often something else ends it first: its
checkpoints fail (the next attempt owns the storage now) until the failure budget is
spent, or none completes and the stall watch fires. Its exit code and its last log
line should still say it was fenced, the cause the operator and a reader act on.
"""

from __future__ import annotations

import logging

from cjob_checkpoint.store.completed_store import CompletedCheckpointStore, FencedError

log = logging.getLogger(__name__)


def fenced_instead(outcome: BaseException, *,
                   store: CompletedCheckpointStore) -> BaseException:
    """``outcome``, or the :class:`FencedError` of a newer attempt that owns the store.

    One read of the store; when it cannot be read, the failure stays as it was (the
    attempt is ending anyway, and guessing would misreport a real failure).
    """
    if isinstance(outcome, FencedError):
        return outcome
    try:
        store.check_fence()
    except FencedError as fenced:
        log.warning("this attempt failed (%s) after a newer attempt took the store over",
                    outcome)
        return fenced
    except Exception as exc:
        log.warning("could not read whether a newer attempt owns the store: %s", exc)
    return outcome
