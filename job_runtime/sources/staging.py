"""What a source prepares on the driver with: the job's staging area and its published inputs.

A source that stages its input (the ``dataframe`` source's Parquet files) hands
its subtasks positions into what it staged, and checkpoints keep those positions.
Two live drivers of one job may prepare at once, so a driver stages only into a
directory of its own (named by its attempt and a token of this process: two runs
never share one) and then publishes it through the completed-checkpoint store,
whose fenced, first-wins publication decides which copy the job reads for good
(:meth:`~cjob_checkpoint.store.backed.BackedCheckpointStore.publish_staged_input`).

What each source ends up reading is collected here and shipped to the subtasks
(``SourceContext.staged_inputs``): they never list or guess staging directories.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol

from cjob_checkpoint.store.staged_inputs import StagedInput


class InputPublisher(Protocol):
    """What publishes staged inputs: the job's completed-checkpoint store."""

    def publish_staged_input(self, candidate: StagedInput) -> StagedInput:
        """Publish ``candidate`` under the fence unless its name is taken; the winner."""

    def staged_input(self, name: str) -> StagedInput | None:
        """The published input ``name``, if any."""


class DriverStaging:
    """The staging area at ``uri`` as attempt ``attempt`` of the job uses it.

    ``run`` names this driver process among every run of the attempt (a fresh token
    unless given), so no two drivers ever write into the same directory.
    """

    def __init__(self, *, uri: str, attempt: int, store: InputPublisher,
                 run: str | None = None) -> None:
        self.uri = uri
        self.attempt = attempt
        self.store = store
        self.run = run if run is not None else uuid.uuid4().hex[:8]
        self._inputs: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"DriverStaging({self.uri!r}, attempt={self.attempt}, run={self.run!r})"

    @property
    def own_directory(self) -> str:
        """The name of the directories this driver stages into (one per input)."""
        return f"attempt-{self.attempt}-{self.run}"

    def use(self, staged: StagedInput) -> StagedInput:
        """Read the published ``staged`` for its input; returns it."""
        self._inputs[staged.name] = staged.uri
        return staged

    @property
    def inputs(self) -> Mapping[str, str]:
        """Input name -> the published location its subtasks read."""
        return dict(self._inputs)
