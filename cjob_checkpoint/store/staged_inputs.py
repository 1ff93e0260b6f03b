"""Which staged copy of each input a job reads: the store's record of published inputs.

A source that stages its input on the driver (the ``dataframe`` source writes a
DataFrame as Parquet files) hands its subtasks positions into those files, and a
checkpoint keeps those positions. Two live drivers of one job (a false "driver
lost" report, a partitioned node) may both stage, so each attempt stages into a
directory of its own and then *publishes* it here, under the store's fence: the
first input published under a name is the job's input for good, and every later
attempt, and every restore, reads that one (see
:meth:`~cjob_checkpoint.store.backed.BackedCheckpointStore.publish_staged_input`).

The record crosses process (and image version) boundaries, so it is typed and
versioned JSON, one document for every input of the job::

    {"version": 1, "inputs": {"numbers": {"uri": ".../staging/numbers.attempts/attempt-2-1f0c9e2a",
                                          "attempt": 2, "origin": "Staged"}}}

A reader that meets another version refuses it rather than guessing: a guess
could stage the input again and give a restored checkpoint's positions to other
files.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from cjob_checkpoint.keyword_error import keyword_error
from cjob_checkpoint.store.completed_store import FencedError, StoreError
from cjob_spec.versioned import versioned_body

STAGED_INPUTS_VERSION = 1

__all__ = [
    "STAGED_INPUTS_VERSION",
    "StagedInput",
    "StagedInputFencedError",
    "StagedInputOrigin",
    "StagedInputs",
    "UnreadableStagedInputsError",
]


class UnreadableStagedInputsError(StoreError, ValueError):
    """The recorded document is not one this version understands; never overwritten."""

    reason = "UnreadableStagedInputs"


@keyword_error
class StagedInputFencedError(FencedError):
    """An attempt that no longer owns the store tried to publish what it staged."""

    name: str

    def describe(self) -> str:
        return (f"attempt {self.attempt} may not publish the staged input {self.name!r}: "
                f"attempt {self.current_attempt} owns the store")


class StagedInputOrigin(enum.Enum):
    """How the published copy came to be."""

    STAGED = "Staged"
    """An attempt staged it into a directory of its own."""
    ADOPTED = "Adopted"
    """Staging that one shared directory per input held before inputs were published,
    taken over as it is, so the checkpoints that name its files still restore."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedInput:
    """The staged copy of the input ``name`` at ``uri``, published by ``attempt``."""

    name: str
    uri: str
    attempt: int
    origin: StagedInputOrigin = StagedInputOrigin.STAGED

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "attempt": self.attempt, "origin": self.origin.value}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedInputs:
    """Every published input of a job, by name."""

    inputs: Mapping[str, StagedInput] = dataclasses.field(default_factory=dict)
    version: int = STAGED_INPUTS_VERSION

    def get(self, name: str) -> StagedInput | None:
        return self.inputs.get(name)

    def with_input(self, staged: StagedInput) -> StagedInputs:
        """These inputs and ``staged``; publishing a name twice is refused here, so no
        caller can replace what restores depend on."""
        if staged.name in self.inputs:
            raise ValueError(f"the staged input {staged.name!r} is already published")
        return dataclasses.replace(self, inputs={**self.inputs, staged.name: staged})

    def encode(self) -> str:
        return json.dumps(
            {"version": self.version,
             "inputs": {name: staged.to_dict() for name, staged in self.inputs.items()}},
            sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> StagedInputs:
        """The document ``text`` holds; ``None`` (nothing recorded) is no input."""
        if text is None:
            return cls()
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UnreadableStagedInputsError(f"published staged inputs: not JSON: {exc}") \
                from None
        body = versioned_body(data, what="published staged inputs",
                              version=STAGED_INPUTS_VERSION, error=UnreadableStagedInputsError)
        entries = body.get("inputs")
        if not isinstance(entries, Mapping):
            raise UnreadableStagedInputsError("published staged inputs: inputs is not an object")
        return cls(inputs={str(name): _entry(str(name), entry)
                           for name, entry in entries.items()})


def _entry(name: str, entry: object) -> StagedInput:
    if not isinstance(entry, Mapping):
        raise UnreadableStagedInputsError(f"published staged input {name!r}: not an object")
    uri, attempt, origin = entry.get("uri"), entry.get("attempt"), entry.get("origin")
    if not isinstance(uri, str) or not uri:
        raise UnreadableStagedInputsError(f"published staged input {name!r}: no uri")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise UnreadableStagedInputsError(
            f"published staged input {name!r}: attempt {attempt!r} is not a number >= 0")
    try:
        kind = StagedInputOrigin(origin)
    except ValueError:
        raise UnreadableStagedInputsError(
            f"published staged input {name!r}: unknown origin {origin!r}") from None
    return StagedInput(name=name, uri=uri, attempt=attempt, origin=kind)
