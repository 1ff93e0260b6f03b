"""Staging an input once per job, safely against a second live driver of the same job.

The rules, for an input ``name`` under the job's staging area ``<staging>``:

* A copy already published in the store is the input, for good: it is used as it
  is and nothing is staged again (a later attempt, a restore).
* Staging that one shared directory ``<staging>/<name>/`` holds (complete, with
  ``_SUCCESS``) but that was never published dates from before inputs were
  published: it is adopted as it is, so the checkpoints whose positions name its
  files still restore.
* Otherwise this driver stages into ``<staging>/<name>.attempts/attempt-<N>-<run>/``,
  a directory no other driver writes, and publishes it under the store's fence. A
  driver that lost the fence meanwhile fails with a ``FencedError``; one that finds
  another copy published first uses that one. Either way it deletes its own copy,
  the only directory it may know to be unused.

Directories of drivers that died before publishing stay behind; nobody reads
them (the subtasks read only the published location), and deleting the job's
staging area removes them with the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cjob_checkpoint.storage.factory import get_filesystem
from cjob_checkpoint.storage.file_system import join_uri
from cjob_checkpoint.store.completed_store import FencedError
from cjob_checkpoint.store.staged_inputs import StagedInput, StagedInputOrigin
from job_runtime.sources.staging import DriverStaging

_log = logging.getLogger(__name__)

COMPLETE_MARKER = "_SUCCESS"
"""What Spark writes last into a directory it wrote completely."""

ATTEMPTS_SUFFIX = ".attempts"
"""The directories of one input's per-attempt copies sit in ``<name>.attempts/``: beside
the shared directory of earlier versions, never below it, so listing that one (a
recursive listing) never meets them."""


def shared_directory(staging_uri: str, name: str) -> str:
    """``<staging>/<name>``: where every attempt staged ``name`` before publication."""
    return join_uri(staging_uri, name)


def own_directory(staging: DriverStaging, name: str) -> str:
    """``<staging>/<name>.attempts/attempt-<N>-<run>``: where this driver stages ``name``."""
    return join_uri(staging.uri, name + ATTEMPTS_SUFFIX, staging.own_directory)


def stage_once(*, staging: DriverStaging, name: str,
               stage: Callable[[str], None]) -> StagedInput:
    """The published copy of the input ``name``, staged by ``stage(uri)`` if none is.

    ``stage`` writes the input completely into the directory it is given, ending
    with :data:`COMPLETE_MARKER`. Raises ``FencedError`` when this attempt no longer
    owns the store; see the module docstring for the rules.
    """
    published = staging.store.staged_input(name)
    if published is not None:
        _log.info("input %r: reading the copy attempt %d published at %s", name,
                  published.attempt, published.uri)
        return staging.use(published)
    shared = shared_directory(staging.uri, name)
    if get_filesystem(shared).exists(join_uri(shared, COMPLETE_MARKER)):
        adopted = StagedInput(name=name, uri=shared, attempt=staging.attempt,
                              origin=StagedInputOrigin.ADOPTED)
        return staging.use(staging.store.publish_staged_input(adopted))
    target = own_directory(staging, name)
    stage(target)
    candidate = StagedInput(name=name, uri=target, attempt=staging.attempt)
    try:
        winner = staging.store.publish_staged_input(candidate)
    except FencedError:
        _discard(target, name=name)
        raise
    if winner.uri != target:
        _discard(target, name=name)
    else:
        _log.info("input %r: staged and published at %s", name, target)
    return staging.use(winner)


def _discard(uri: str, *, name: str) -> None:
    """Delete this driver's unpublished copy; one left behind is only wasted space."""
    try:
        get_filesystem(uri).delete_prefix(uri)
    except Exception as exc:
        _log.warning("input %r: could not delete the unused copy at %s: %s", name, uri, exc)
